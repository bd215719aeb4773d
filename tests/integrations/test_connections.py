"""Connections over OAuth 2.0 with PKCE, end to end against a local stand-in authorization
server: authorize → callback (state, verifier) → token → use → refresh → revoke; which account
a call uses; the reconnect prompt; disconnecting; key rotation; another tenant sees nothing."""

import threading
from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from django.core.management import call_command
from django.db import connection as db
from django.db import transaction
from django.test import Client, override_settings
from django.utils import timezone

from agntchat.core import crypto
from conversations.actions import post_message
from integrations import connections
from integrations.models import Connection, OAuthFlow
from tests.concurrency import backend_pid, sessions_waiting_on_me
from tests.integrations.oauth_standin import AuthServer, serving
from tests.waiting import wait_until
from work.tools.registry import ToolContext
from workspaces.actions import change_role
from workspaces.models import Credential, Membership, Role

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def standin():
    with serving(AuthServer()) as server:
        yield server


def browser_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def connect(user, server, workspace=None, provider="google"):
    """The whole dance as a browser does it: start, visit the provider, come back."""
    client = browser_for(user)
    body = {"provider": provider} | ({"workspace": str(workspace.id)} if workspace else {})
    started = client.post("/api/v1/connections/", body, content_type="application/json")
    assert started.status_code == 200, started.content
    authorize = httpx.get(started.json()["authorizeUrl"])
    assert authorize.status_code == 302
    back = urlparse(authorize.headers["location"])
    assert back.path == f"/oauth/{provider}/callback"
    returned = client.get(back.path, parse_qs(back.query) | {})
    return client, returned


def test_connecting_runs_the_pkce_dance_and_keeps_the_tokens_encrypted(alice, standin):
    client, returned = connect(alice, standin)
    assert returned.status_code == 302
    connection = Connection.objects.get(user=alice, provider="google")
    assert connection.account == "alice@example.com"
    assert connection.status == "active" and connection.workspace_id is None
    # The token endpoint got the verifier that matches the challenge (the stand-in checked it).
    exchange = standin.token_requests[0]
    assert exchange["grant_type"] == "authorization_code" and len(exchange["code_verifier"]) >= 43
    access = crypto.decrypt(connection.access_ciphertext)
    assert access in standin.access
    assert access not in connection.access_ciphertext
    assert crypto.decrypt(connection.refresh_ciphertext) in standin.refresh
    assert OAuthFlow.objects.count() == 0  # used up
    page = client.get(returned.headers["location"])
    assert b"Connected Google as alice@example.com" in page.content


def test_a_state_is_good_once_and_only_for_who_started_it(alice, bob, standin):
    client = browser_for(alice)
    started = client.post(
        "/api/v1/connections/", {"provider": "google"}, content_type="application/json"
    )
    back = urlparse(httpx.get(started.json()["authorizeUrl"]).headers["location"])
    query = {k: v[0] for k, v in parse_qs(back.query).items()}
    # Bob cannot finish Alice's authorization with her state.
    stolen = browser_for(bob).get(back.path, query, follow=True)
    assert b"expired or was already used" in stolen.content
    assert not Connection.objects.exists()
    assert client.get(back.path, query).status_code == 302
    again = client.get(back.path, query, follow=True)
    assert b"expired or was already used" in again.content
    assert Connection.objects.count() == 1


def test_a_refused_consent_changes_nothing(alice, standin):
    client = browser_for(alice)
    started = client.post(
        "/api/v1/connections/", {"provider": "github"}, content_type="application/json"
    )
    state = parse_qs(urlparse(started.json()["authorizeUrl"]).query)["state"][0]
    page = client.get(
        "/oauth/github/callback", {"state": state, "error": "access_denied"}, follow=True
    )
    assert b"did not give access (access_denied)" in page.content
    assert not Connection.objects.exists()


def test_only_a_workspace_admin_connects_the_workspace_account(alice, bob, team_a, standin):
    client = browser_for(bob)
    refused = client.post(
        "/api/v1/connections/",
        {"provider": "google", "workspace": str(team_a.id)},
        content_type="application/json",
    )
    assert refused.status_code == 403
    connect(alice, standin, workspace=team_a)
    shared = Connection.objects.get(workspace=team_a)
    assert shared.user_id is None and shared.created_by == alice
    # Bob, a member, sees it; he cannot disconnect it.
    listed = client.get("/api/v1/connections/").json()["results"]
    assert [c["id"] for c in listed] == [str(shared.id)]
    assert client.delete(f"/api/v1/connections/{shared.id}/").status_code == 403
    assert Connection.objects.filter(pk=shared.pk).exists()


@pytest.mark.parametrize("lost", ["removed", "demoted"])
def test_an_admin_who_lost_the_role_cannot_finish_a_workspace_sign_in(
    alice, bob, team_a, standin, lost
):
    """The workspace's account acts for everyone in it: a sign-in an admin started before
    being removed or demoted is refused at the callback, and the account already set stays."""
    connect(alice, standin, workspace=team_a)
    kept = Connection.objects.get(workspace=team_a)
    membership = Membership.objects.get(workspace=team_a, user=bob)
    membership.role = Role.ADMIN
    membership.save()
    client = browser_for(bob)
    started = client.post(
        "/api/v1/connections/",
        {"provider": "google", "workspace": str(team_a.id)},
        content_type="application/json",
    )
    assert started.status_code == 200, started.content
    back = urlparse(httpx.get(started.json()["authorizeUrl"]).headers["location"])
    owner = browser_for(alice)
    if lost == "removed":
        gone = owner.delete(f"/api/v1/workspaces/{team_a.id}/members/{bob.id}/")
    else:
        gone = owner.patch(
            f"/api/v1/workspaces/{team_a.id}/members/{bob.id}/",
            {"role": "member"},
            content_type="application/json",
        )
    assert gone.status_code in (200, 204), gone.content
    page = client.get(back.path, parse_qs(back.query), follow=True)
    assert b"you no longer are one; nothing changed" in page.content
    assert list(Connection.objects.filter(workspace=team_a)) == [kept]
    kept.refresh_from_db()
    assert kept.created_by == alice and kept.account == "alice@example.com"


def test_a_demotion_committing_during_the_callback_is_waited_for_and_refuses_it(
    alice, bob, team_a, standin, monkeypatch
):
    """Bob, an admin, is demoted while the provider sends him back: after the callback's first
    look at his role, before the connection is stored. The callback reads the role again under
    his membership's lock, so it waits for the demotion to commit and then refuses; a read
    without the lock would see him still an admin and store his account for the workspace."""
    owner = team_a.memberships.get(user=alice)
    bobs = change_role(owner, team_a.memberships.get(user=bob), Role.ADMIN)
    client = browser_for(bob)
    started = client.post(
        "/api/v1/connections/",
        {"provider": "google", "workspace": str(team_a.id)},
        content_type="application/json",
    )
    assert started.status_code == 200, started.content
    back = urlparse(httpx.get(started.json()["authorizeUrl"]).headers["location"])
    demotion_held, callback_done = threading.Event(), threading.Event()
    seen, demoters = [], []

    def demote_and_hold(callback_pid):
        """In a transaction of its own: demote Bob and keep his row locked until the callback
        is seen waiting for it (or has finished without waiting)."""
        try:
            with transaction.atomic():
                change_role(owner, bobs, Role.MEMBER)
                demotion_held.set()

                def callback_waited_or_finished():
                    if callback_pid in sessions_waiting_on_me():
                        return "waited"
                    return callback_done.is_set() and "finished"

                seen.append(
                    wait_until(callback_waited_or_finished, what="the callback to wait or finish")
                )
        finally:
            demotion_held.set()
            db.close()

    account = connections._account

    def account_then_demotion(provider, access_token):
        """The account is learnt between the two looks at the role: the demotion starts then."""
        demoter = threading.Thread(target=demote_and_hold, args=(backend_pid(),))
        demoters.append(demoter)
        demoter.start()
        demotion_held.wait(timeout=20)
        return account(provider, access_token)

    monkeypatch.setattr(connections, "_account", account_then_demotion)
    try:
        page = client.get(back.path, parse_qs(back.query), follow=True)
    finally:
        callback_done.set()
        for demoter in demoters:
            demoter.join(timeout=20)
    assert seen == ["waited"]
    assert b"you no longer are one; nothing changed" in page.content
    assert not Connection.objects.filter(workspace=team_a).exists()
    bobs.refresh_from_db()
    assert bobs.role == Role.MEMBER


def test_another_workspaces_person_finds_no_connection(alice, charlie, team_a, standin):
    connect(alice, standin, workspace=team_a)
    shared = Connection.objects.get(workspace=team_a)
    client = browser_for(charlie)
    assert client.get(f"/api/v1/connections/{shared.id}/").status_code == 404
    assert client.delete(f"/api/v1/connections/{shared.id}/").status_code == 404
    assert client.get("/api/v1/connections/").json()["results"] == []
    assert Connection.objects.filter(pk=shared.pk).exists()
    started = client.post(
        "/api/v1/connections/",
        {"provider": "google", "workspace": str(team_a.id)},
        content_type="application/json",
    )
    assert started.status_code == 404
    bad = client.post("/api/v1/connections/", {"provider": "myspace"}, "application/json")
    assert bad.status_code == 400 and not OAuthFlow.objects.exists()


def test_a_provider_without_an_app_is_refused_clearly(alice):
    with override_settings(OAUTH_PROVIDERS={"google": {"client_id": ""}, "github": {}}):
        refused = browser_for(alice).post(
            "/api/v1/connections/", {"provider": "google"}, content_type="application/json"
        )
    assert refused.status_code == 409
    assert "GOOGLE_CLIENT_ID" in refused.json()["error"]["message"]
    assert not OAuthFlow.objects.exists()


def context_in(conversation, message=None):
    return ToolContext(None, conversation.workspace, conversation, message=message)


def test_the_account_comes_from_where_the_agent_acts(alice, bob, team_a, channel, nova, standin):
    """Team A's account for everyone in team A; in Bob's personal workspace, where the same agent
    is asked too, Bob's own account; nobody's account elsewhere."""
    standin.account = "team-a@example.com"
    connect(alice, standin, workspace=team_a)
    standin.account = "bob@example.com"
    connect(bob, standin)
    in_team = post_message(bob, channel, "summarise my inbox")
    assert connections.account_for(context_in(channel, in_team), "google").account == (
        "team-a@example.com"
    )
    from conversations.actions import create_conversation

    personal = bob.memberships.get(workspace__kind="personal").workspace
    own = create_conversation(bob, personal, kind="channel", title="mine")
    asked = post_message(bob, own, "summarise my inbox")
    assert connections.account_for(context_in(own, asked), "google").account == "bob@example.com"
    by_alice = post_message(alice, own if False else channel, "and mine")
    assert connections.account_for(context_in(channel, by_alice), "google").account == (
        "team-a@example.com"
    )
    with pytest.raises(connections.NotConnected, match="No GitHub account is connected"):
        connections.account_for(context_in(own, asked), "github")


def test_a_message_from_an_outside_chat_uses_no_personal_account(alice, team_a, nova, standin):
    """A Telegram message is stored as the person who linked the chat, but they did not write
    it: no account of theirs is used, not even in their personal workspace."""
    connect(alice, standin)
    from conversations.actions import create_conversation

    personal = alice.memberships.get(workspace__kind="personal").workspace
    own = create_conversation(alice, personal, kind="channel", title="mine")
    outside = post_message(
        alice, own, "@nova read me the mail",
        payload={"external_author": {"channel": "telegram", "name": "Dana"}},
    )  # fmt: skip
    context = ToolContext(nova, personal, own, message=outside)
    with pytest.raises(connections.NotConnected):
        connections.account_for(context, "google")
    mine = post_message(alice, own, "@nova read me the mail")
    assert connections.account_for(ToolContext(nova, personal, own, message=mine), "google")


def expire(connection):
    Connection.objects.filter(pk=connection.pk).update(
        expires_at=timezone.now() + timedelta(seconds=5)
    )
    connection.refresh_from_db()


def ping(connection):
    return connections.api_request(connection, "GET", f"{connection_url()}/api/ping")


def connection_url():
    from django.conf import settings

    return settings.OAUTH_PROVIDERS["google"]["token_url"].rsplit("/", 1)[0]


def test_an_expiring_token_is_refreshed_before_use_and_kept(alice, standin):
    connect(alice, standin)
    connection = Connection.objects.get(user=alice)
    old = crypto.decrypt(connection.access_ciphertext)
    expire(connection)
    answer = ping(connection)
    assert answer.status_code == 200
    fresh = Connection.objects.get(pk=connection.pk)
    assert crypto.decrypt(fresh.access_ciphertext) == answer.json()["token"] != old
    assert fresh.expires_at > timezone.now() + timedelta(minutes=30)
    assert fresh.refreshed_at is not None
    # Google sends no new refresh token on refresh: the one from consent is kept.
    assert crypto.decrypt(fresh.refresh_ciphertext) in standin.refresh


def test_callers_at_once_refresh_the_token_once(alice, standin):
    """Eight threads, each with its own database connection, use an expiring token together:
    one refresh reaches the provider (a rotating provider would break the others otherwise)."""
    standin.rotate_refresh = True
    standin.slow_refresh = 0.3
    connect(alice, standin)
    connection = Connection.objects.get(user=alice)
    expire(connection)
    tokens, errors = [], []

    def use():
        from django.db import connection as db

        try:
            tokens.append(connections.access_token(Connection.objects.get(pk=connection.pk)))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            db.close()

    threads = [threading.Thread(target=use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    refreshes = [r for r in standin.token_requests if r["grant_type"] == "refresh_token"]
    assert len(refreshes) == 1
    assert len(set(tokens)) == 1 and tokens[0] in standin.access


def test_a_refresh_made_inside_a_failing_call_is_still_kept(alice, standin):
    """The refresh commits apart from the transaction that needed it: a rotating provider has
    already forgotten the old refresh token."""
    from django.db import transaction

    standin.rotate_refresh = True
    connect(alice, standin)
    connection = Connection.objects.get(user=alice)
    expire(connection)
    with pytest.raises(RuntimeError), transaction.atomic():
        assert ping(connection).status_code == 200
        raise RuntimeError("the tool call failed afterwards")
    kept = Connection.objects.get(pk=connection.pk)
    assert crypto.decrypt(kept.refresh_ciphertext) in standin.refresh
    assert ping(kept).status_code == 200


def test_a_revoked_grant_asks_the_person_to_reconnect(alice, standin):
    connect(alice, standin)
    connection = Connection.objects.get(user=alice)
    standin.revoke_all()
    with pytest.raises(connections.ReconnectNeeded) as refused:
        ping(connection)
    assert "needs to be connected again" in refused.value.message
    assert "Settings → Connections" in refused.value.message
    stored = Connection.objects.get(pk=connection.pk)
    assert stored.status == "reconnect" and "Token revoked" in stored.problem
    # The next call is refused at once, without reaching the provider.
    before = len(standin.token_requests)
    with pytest.raises(connections.ReconnectNeeded):
        connections.account_for(
            ToolContext(None, alice.memberships.get().workspace, None), "google"
        )
    assert len(standin.token_requests) == before
    personal = alice.memberships.get().workspace
    page = browser_for(alice).get(f"/w/{personal.id}/connections/")
    assert b"Reconnect needed" in page.content and b"Reconnect Google" in page.content
    assert b"to reconnect" in page.content  # the sidebar's count
    # Reconnecting makes the same row good again.
    connect(alice, standin)
    assert Connection.objects.get(pk=connection.pk).status == "active"


def test_disconnecting_revokes_at_the_provider(alice, standin):
    connect(alice, standin, provider="github")
    connection = Connection.objects.get(user=alice, provider="github")
    token = crypto.decrypt(connection.access_ciphertext)
    answer = browser_for(alice).delete(f"/api/v1/connections/{connection.id}/")
    assert answer.status_code == 204
    assert token in standin.revoked and token not in standin.access
    assert not Connection.objects.exists()


def test_rotating_keys_re_encrypts_every_secret(alice, team_a, standin):
    from cryptography.fernet import Fernet

    old_key, new_key = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    with override_settings(FERNET_KEYS=[old_key]):
        connect(alice, standin)
        from workspaces import actions as workspace_actions

        workspace_actions.create_credential(
            team_a.memberships.get(user=alice), "search-key", "sk-123"
        )
    with override_settings(FERNET_KEYS=[new_key, old_key]):
        call_command("rotate_encryption_keys", stdout=open("/dev/null", "w"))
    with override_settings(FERNET_KEYS=[new_key]):
        connection = Connection.objects.get(user=alice)
        assert crypto.decrypt(connection.access_ciphertext) in standin.access
        assert crypto.decrypt(Credential.objects.get().ciphertext) == "sk-123"


def test_a_connection_is_forgotten_even_once_its_app_is_gone(alice, standin):
    connect(alice, standin)
    connection = Connection.objects.get(user=alice)
    with override_settings(OAUTH_PROVIDERS={"google": {"client_id": ""}, "github": {}}):
        answer = browser_for(alice).delete(f"/api/v1/connections/{connection.id}/")
    assert answer.status_code == 204 and not Connection.objects.exists()
    assert standin.revoked == []  # nothing to call: the server no longer has the app


# ---- the audit log (issue 27) -------------------------------------------------------------------


def audit_rows(**filters) -> list[tuple]:
    from workspaces.models import AuditEntry

    rows = AuditEntry.objects.filter(action__startswith="connection.", **filters)
    return list(rows.order_by("created_at").values_list("action", "actor_user", "target_label"))


def test_connecting_refusing_and_disconnecting_are_in_the_audit_log(alice, team_a, standin):
    personal = alice.owned_workspaces.get(kind="personal")
    connect(alice, standin)
    connect(alice, standin, workspace=team_a, provider="github")
    standin.revoke_all()
    mine = Connection.objects.get(user=alice)
    with pytest.raises(connections.ReconnectNeeded):
        ping(mine)
    with pytest.raises(connections.ReconnectNeeded):
        ping(mine)  # refused again: no second row
    team = Connection.objects.get(workspace=team_a)
    assert browser_for(alice).delete(f"/api/v1/connections/{team.id}/").status_code == 204
    google, github = "Google: alice@example.com", f"GitHub: {team.account}"
    assert audit_rows(workspace=personal) == [
        ("connection.connected", alice.id, google),
        ("connection.refresh_failed", None, google),
    ]
    assert audit_rows(workspace=team_a) == [
        ("connection.connected", alice.id, github),
        ("connection.disconnected", alice.id, github),
    ]


def test_a_refused_consent_leaves_no_audit_row(alice, standin):
    from workspaces.models import AuditEntry

    client = browser_for(alice)
    started = client.post("/api/v1/connections/", {"provider": "google"}, "application/json")
    state = parse_qs(urlparse(started.json()["authorizeUrl"]).query)["state"][0]
    client.get("/oauth/google/callback", {"state": state, "error": "access_denied"})
    assert not AuditEntry.objects.filter(action__startswith="connection.").exists()


# A provider whose endpoints answer nothing (a closed port): Authlib's client (httpx2 underneath)
# fails with errors of its own, which must read as "unreachable", not crash.
UNREACHABLE = {
    "client_id": "c", "client_secret": "s", "authorize_url": "http://127.0.0.1:9/authorize",
    "token_url": "http://127.0.0.1:9/token", "revoke_url": "http://127.0.0.1:9/revoke",
    "account_url": "http://127.0.0.1:9/me", "scopes": ["x"],
}  # fmt: skip


def expiring(alice):
    return Connection.objects.create(
        provider="google", user=alice, account="alice@gmail.example",
        access_ciphertext=crypto.encrypt("tok-old"), refresh_ciphertext=crypto.encrypt("rt"),
        expires_at=timezone.now() - timedelta(minutes=5),
    )  # fmt: skip


@override_settings(OAUTH_PROVIDERS={"google": UNREACHABLE, "github": UNREACHABLE})
def test_a_provider_out_of_reach_is_said_so_and_a_disconnect_still_forgets(alice, api):
    connection = expiring(alice)
    with pytest.raises(connections.ProviderUnreachable, match="to renew access"):
        connections.access_token(connection)
    assert api(alice).delete(f"/api/v1/connections/{connection.id}/").status_code == 204
    assert not Connection.objects.filter(pk=connection.pk).exists()
