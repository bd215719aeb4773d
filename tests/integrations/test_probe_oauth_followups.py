"""Follow-ups of the OAuth probe, against the local stand-in authorization server: a callback
whose account lookup fails gives the new grant back; a token endpoint answering no token is
said clearly; reconnecting to another account revokes the old grant; callbacks arriving at once
end with one connection; GitHub's grant revoke is not used where it would end another
connection's access."""

import html
import re
import threading
from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from django.test import override_settings
from django.utils import timezone

from agntchat.core import crypto
from integrations import connections
from integrations.models import Connection
from tests.concurrency import run_together, sessions_waiting_on_me
from tests.integrations.oauth_standin import CLIENT_ID, AuthServer, serving
from tests.integrations.test_connections import browser_for, connect
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


class GitHubStandin(AuthServer):
    """The stand-in, with GitHub's DELETE /applications/{client_id}/token too: one token is
    revoked, the grant's other tokens keep working. Both take only a live access token."""

    def _handler(self):
        server, base = self, super()._handler()

        class Handler(base):
            def do_DELETE(self):
                token = self._form().get("access_token", "")
                if token not in server.access:  # GitHub: 404 unless the token is live
                    return self._send(404, {"message": "Not Found"})
                if self.path != f"/applications/{CLIENT_ID}/token":
                    server.revoked.append(token)
                    server.revoke_all()
                    return self._send(204)
                with server.lock:
                    server.token_revoked.append(token)
                    server.access.discard(token)
                return self._send(204)

        return Handler

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.token_revoked: list[str] = []


@pytest.fixture
def standin():
    with serving(GitHubStandin()) as server:
        yield server


def messages_of(page) -> str:
    """The message the connections page shows after the callback."""
    found = re.search(r'class="flash[^"]*" role="status">([^<]*)', page.content.decode())
    return html.unescape(found.group(1)) if found else ""


# ---- 1. the callback after the code was traded ---------------------------------------------


def test_an_account_lookup_failing_after_the_trade_gives_the_grant_back(alice, standin):
    """The token endpoint gave tokens, then the account endpoint failed (here: 404). The person
    is told what happened (not "could not reach"), and the grant just made is revoked rather
    than left behind at the provider, unused and unseen."""
    broken = standin.provider_settings() | {"account_url": f"{standin.url}/gone"}
    with override_settings(OAUTH_PROVIDERS={"google": broken}):
        client, returned = connect(alice, standin)
        page = client.get(returned.headers["location"])
    text = messages_of(page)
    assert "Could not reach" not in text
    assert "which account" in text and "revoked" in text, text
    assert not Connection.objects.exists()
    (refresh,) = standin.refresh  # the one grant made, given back with its refresh token
    assert standin.revoked == [refresh]


@pytest.mark.parametrize(
    "answer",
    [
        (200, b"<html>Sign in to the Wi-Fi</html>"),  # a captive proxy's page
        (200, b"access_token=x&scope=repo"),  # GitHub's form-encoded default
        (200, b'{"token_type": "Bearer"}'),  # JSON, but no token in it
    ],
)
def test_a_token_endpoint_answering_no_token_at_the_callback_is_said_clearly(
    alice, standin, answer
):
    standin.outage = answer
    client, returned = connect(alice, standin)
    text = messages_of(client.get(returned.headers["location"]))
    assert "did not answer with a token" in text, text
    assert "Expecting value" not in text and "KeyError" not in text
    assert not Connection.objects.exists()


# ---- 2. reconnecting to another account -----------------------------------------------------


def test_reconnecting_to_another_account_revokes_the_old_grant(alice, standin):
    connect(alice, standin)
    old = Connection.objects.get(user=alice)
    old_refresh = crypto.decrypt(old.refresh_ciphertext)
    standin.account = "alice.work@example.com"
    connect(alice, standin)
    new = Connection.objects.get(user=alice)
    assert new.account == "alice.work@example.com"
    assert standin.revoked == [old_refresh]
    # The new grant was stored first and is untouched.
    assert crypto.decrypt(new.access_ciphertext) in standin.access


def test_reconnecting_to_the_same_account_revokes_nothing(alice, standin):
    """Google keeps one grant per account and app: revoking the old token would end the new."""
    connect(alice, standin)
    connect(alice, standin)
    assert standin.revoked == []
    assert Connection.objects.get(user=alice).status == "active"


def test_reconnecting_away_from_an_account_another_connection_uses_revokes_nothing(
    alice, team_a, standin
):
    connect(alice, standin)
    connect(alice, standin, workspace=team_a)  # the same Google account, for the workspace
    standin.account = "alice.work@example.com"
    connect(alice, standin)
    assert standin.revoked == []
    shared = Connection.objects.get(workspace=team_a)
    assert shared.account == "alice@example.com" and shared.status == "active"


# ---- 3. callbacks at once -------------------------------------------------------------------


def started_callback(user, server, provider="google"):
    """A browser that started connecting and was sent back: (client, callback path, query)."""
    client = browser_for(user)
    started = client.post(
        "/api/v1/connections/", {"provider": provider}, content_type="application/json"
    )
    back = urlparse(httpx.get(started.json()["authorizeUrl"]).headers["location"])
    return client, back.path, {k: v[0] for k, v in parse_qs(back.query).items()}


def test_callbacks_at_once_end_with_one_connection_and_no_error(alice, standin, monkeypatch):
    """Three tabs come back from the provider at the same moment. The first to store its
    connection holds its transaction open until the others are seen waiting on it (they
    found no row and are inserting theirs): each then ends with the one connection, none
    with a 500 (an IntegrityError raised through the test client)."""
    record = connections.record_audit
    first = threading.Lock()
    waited = []

    def record_then_hold(*args, **kwargs):
        record(*args, **kwargs)
        if first.acquire(blocking=False):
            waited.append(
                wait_until(lambda: len(sessions_waiting_on_me()) >= 2, what="the other callbacks")
            )

    monkeypatch.setattr(connections, "record_audit", record_then_hold)
    tabs = [started_callback(alice, standin) for _ in range(3)]
    pages = run_together(lambda client, path, query: client.get(path, query), tabs)
    assert waited  # the callbacks did overlap
    assert [page.status_code for page in pages] == [302, 302, 302]
    connection = Connection.objects.get(user=alice, provider="google")
    assert crypto.decrypt(connection.access_ciphertext) in standin.access
    # The same account each time: no grant revoked (it is the one grant at Google).
    assert standin.revoked == []


# ---- 6. GitHub's grant revoke ---------------------------------------------------------------


def test_disconnecting_a_github_account_connected_elsewhere_too_revokes_only_its_token(
    alice, team_a, standin
):
    """DELETE /applications/{client_id}/grant deletes every token of the app for that GitHub
    user: the workspace's connection of the same account would stop working. Only this
    connection's token is revoked (DELETE /applications/{client_id}/token)."""
    connect(alice, standin, provider="github")
    connect(alice, standin, workspace=team_a, provider="github")
    mine = Connection.objects.get(user=alice, provider="github")
    shared = Connection.objects.get(workspace=team_a, provider="github")
    assert browser_for(alice).delete(f"/api/v1/connections/{mine.id}/").status_code == 204
    assert standin.revoked == []  # no grant revoke
    assert standin.token_revoked == [crypto.decrypt(mine.access_ciphertext)]
    assert crypto.decrypt(shared.access_ciphertext) in standin.access


def test_disconnecting_the_last_github_connection_of_an_account_revokes_the_grant(alice, standin):
    connect(alice, standin, provider="github")
    mine = Connection.objects.get(user=alice, provider="github")
    assert browser_for(alice).delete(f"/api/v1/connections/{mine.id}/").status_code == 204
    assert standin.revoked == [crypto.decrypt(mine.access_ciphertext)]
    assert standin.access == set()


def test_disconnecting_a_google_account_connected_elsewhere_too_revokes_nothing(
    alice, team_a, standin
):
    """Google ends the whole grant (every token of the account for the app) whichever token it
    is given: the workspace's connection of the same account would stop working."""
    connect(alice, standin)
    connect(alice, standin, workspace=team_a)
    mine = Connection.objects.get(user=alice)
    assert browser_for(alice).delete(f"/api/v1/connections/{mine.id}/").status_code == 204
    assert standin.revoked == []
    assert Connection.objects.filter(workspace=team_a).exists()


def test_disconnecting_github_with_an_expired_access_token_still_revokes_the_grant(alice, standin):
    """A GitHub App's user token expires after 8 hours, and GitHub revokes a grant only when
    given a live access token: the token is renewed first, then the grant revoked."""
    issued = standin.issue()
    standin.access.discard(issued["access"])  # expired
    connection = Connection.objects.create(
        provider="github", user=alice, account="alice@example.com",
        access_ciphertext=crypto.encrypt(issued["access"]),
        refresh_ciphertext=crypto.encrypt(issued["refresh"]),
        expires_at=timezone.now() - timedelta(hours=1),
    )  # fmt: skip
    assert browser_for(alice).delete(f"/api/v1/connections/{connection.id}/").status_code == 204
    assert len(standin.revoked) == 1  # with the renewed token
    assert standin.refresh == set() and standin.access == set()
    assert not Connection.objects.exists()
