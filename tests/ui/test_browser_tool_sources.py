"""A workspace admin adds an outside MCP server in a real browser: fills the form, sees its
tools imported with their risk, grants one to an agent, and takes it away again."""

from playwright.sync_api import expect, sync_playwright

from integrations.models import SourceGrant, ToolSource
from tests.integrations.test_sources import McpStandin
from tests.socket_helpers import Daphne
from tests.ui.browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    MARKS,
    WAIT,
    log_in,
    nova_in_general,
    shot,
)

pytestmark = MARKS


def test_an_admin_adds_an_mcp_server_and_grants_a_tool(orm):
    team, _, nova = orm(nova_in_general)
    crm = McpStandin().start()
    # The stand-in listens on 127.0.0.1, which sources refuse unless the operator allows it.
    server = Daphne(extra_env={"WEB_FETCH_ALLOW_PRIVATE": "1"})
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = log_in(chromium, server, "alice")
            page.goto(f"/w/{team.id}/")
            page.get_by_role("link", name="Tool sources").click()
            page.get_by_label("Kind").select_option("mcp")
            page.get_by_label("Name").fill("crm")
            page.get_by_label("URL").fill(crm.url)
            page.get_by_label("Description").fill("Our customer records")
            page.locator("form[data-add-source] [type=submit]").click()
            source = page.locator("[data-source='crm']")
            expect(source).to_contain_text("crm__lookup", timeout=WAIT)
            expect(source).to_contain_text("crm__remember")
            row = orm(ToolSource.objects.get)
            assert {f["name"]: f["risk"] for f in row.functions}["lookup"] == "read"

            grant = page.get_by_label("Grant crm__lookup to")
            grant.select_option(label="Nova")
            grant.locator("xpath=ancestor::form").locator("[type=submit]").click()
            expect(source.locator("[data-grant='nova']")).to_have_count(1, timeout=WAIT)
            assert orm(lambda: list(SourceGrant.objects.values_list("function", flat=True))) == [
                "lookup"
            ]
            shot(page, "tool-sources-00-granted")

            page.get_by_role("button", name="Take crm__lookup away from Nova").click()
            expect(source.locator("[data-grant='nova']")).to_have_count(0, timeout=WAIT)
            assert orm(SourceGrant.objects.count) == 0
            chromium.close()
    finally:
        server.stop()
        crm.stop()
