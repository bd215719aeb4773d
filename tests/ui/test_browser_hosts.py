"""A workspace admin adds the team's own host in a real browser (WS-2, AGT-6): a key that is not
one is refused on the form, a real one is accepted and never shown; the host's row says how full
it is and offers provisioning and a rolling restart."""

import subprocess

from playwright.sync_api import expect, sync_playwright

from agents.models import Host
from tests.socket_helpers import Daphne
from tests.ui.browser import CHROMIUM, CHROMIUM_ARGS, MARKS, WAIT, log_in, person, shot
from workspaces.actions import create_team_workspace

pytestmark = MARKS


def test_an_admin_adds_a_host(orm, tmp_path):
    team = orm(lambda: create_team_workspace(person("alice", "Alice Martin"), "Tide Lab"))
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True
    )
    key = (tmp_path / "k").read_text()
    server = Daphne()
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = log_in(chromium, server, "alice")
            page.goto(f"/w/{team.id}/members/")
            form = page.get_by_role("form", name="Add a host")
            form.get_by_label("Name").fill("build-1")
            form.get_by_label("Address").fill("build-1.tidelab.example")
            form.get_by_label("Agents at most").fill("4")
            form.get_by_label("SSH private key").fill("my password")
            form.get_by_role("button", name="Add host").click()
            # Said beside the field it is about.
            expect(form.locator(".field-error")).to_contain_text(
                "OpenSSH private key", timeout=WAIT
            )
            expect(form.get_by_label("SSH private key")).to_have_attribute("aria-invalid", "true")
            assert orm(Host.objects.count) == 0

            form.get_by_label("SSH private key").fill(key)
            form.get_by_role("button", name="Add host").click()
            row = page.locator("[data-host-id]")
            expect(row).to_contain_text("build-1", timeout=WAIT)
            expect(row).to_contain_text("0 / 4")
            expect(row).to_contain_text("Not provisioned yet")
            expect(row.get_by_role("button", name="Provision")).to_be_visible()
            assert key.split("\n")[1] not in page.content()
            page.locator("#hosts-title").scroll_into_view_if_needed()
            shot(page, "hosts-00-added")
            chromium.close()
    finally:
        server.stop()
