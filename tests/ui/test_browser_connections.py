"""Connecting a Google account in a real browser: Alice opens Connections, clicks "Connect
Google", goes through the stand-in provider (tests/integrations/oauth_standin.py) and comes back
connected; when the provider later revokes the grant, the page and the sidebar ask her to
reconnect, and reconnecting makes it good again."""

import json

import pytest
from playwright.sync_api import expect

from integrations import connections
from integrations.models import Connection
from tests.integrations.oauth_standin import AuthServer
from tests.socket_helpers import Daphne
from tests.ui.browser import CHROMIUM, CHROMIUM_ARGS, MARKS, WAIT, log_in, person, shot

pytestmark = MARKS


def test_alice_connects_google_and_is_asked_to_reconnect_once_revoked(orm, settings):
    from playwright.sync_api import sync_playwright

    alice = orm(person, "alice", "Alice Martin")
    personal = orm(lambda: alice.memberships.get().workspace)
    with AuthServer(account="alice.martin@example.com") as provider:
        google = provider.provider_settings()
        settings.OAUTH_PROVIDERS = {**settings.OAUTH_PROVIDERS, "google": google}
        server = Daphne(extra_env={"OAUTH_PROVIDERS_JSON": json.dumps({"google": google})})
        try:
            with sync_playwright() as playwright:
                chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = log_in(chromium, server, "alice")
                page.goto(f"/w/{personal.id}/connections/")
                row = page.locator('.connection[data-provider="google"]')
                row.get_by_role("button", name="Connect Google").click()
                # Off to the provider and back through /oauth/google/callback.
                page.wait_for_url(f"**/w/{personal.id}/connections/", timeout=WAIT)
                expect(
                    page.get_by_text("Connected Google as alice.martin@example.com")
                ).to_be_visible()
                expect(row).to_have_attribute("data-connection-status", "active")
                expect(row).to_contain_text("alice.martin@example.com")
                shot(page, "connections-00-connected")

                provider.revoke_all()
                connection = orm(Connection.objects.get)
                with pytest.raises(connections.ReconnectNeeded):
                    orm(connections.api_request, connection, "GET", f"{provider.url}/api/ping")
                page.reload()
                expect(row).to_have_attribute("data-connection-status", "reconnect")
                expect(row.get_by_role("alert")).to_contain_text("Agents cannot use this account")
                expect(page.locator(".nav-item", has_text="Connections")).to_contain_text(
                    "to reconnect"
                )
                shot(page, "connections-01-reconnect")

                row.get_by_role("button", name="Reconnect Google").click()
                page.wait_for_url(f"**/w/{personal.id}/connections/", timeout=WAIT)
                expect(row).to_have_attribute("data-connection-status", "active")
                assert orm(lambda: Connection.objects.get().status) == "active"
                chromium.close()
        finally:
            server.stop()
