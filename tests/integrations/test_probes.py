"""Probes of the integrations as an attacker or a demanding user would try them. Each test
failed before the fix it guards, except those marked as guards of what already held."""

import re
import time
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from agntchat.core import crypto
from conversations.actions import open_direct
from integrations import connections
from integrations.models import Connection
from tests.integrations import standin_fixtures
from tests.integrations.google_github_standin import (
    GitHubStandin,
    Problem,
    connect,
    github_error,
    google_error,
)
from tests.integrations.oauth_standin import AuthServer
from tests.work.tooling import held_message
from work.actions import set_agent_permission, set_tool_grant
from work.tools.registry import REGISTRY

pytestmark = pytest.mark.django_db

google_api = standin_fixtures.google_api
BOT = "team-a-bot"
TEAM = "ops@team-a.example"


def grant(owner, agent, provider):
    """The owner gives AGENT the provider's tools and lets them run without asking."""
    for found in REGISTRY.values():
        if found.connection == provider:
            set_tool_grant(owner, agent, found, True)
            set_agent_permission(owner, agent, found, "allow")


@pytest.fixture
def github_api(settings):
    standin = GitHubStandin().start()
    settings.GITHUB_API_BASE = standin.url
    standin.add_repo("acme/app", {"README.md": "# App\n"}, collaborators={BOT})
    standin.add_token("tok-bot", BOT)
    yield standin
    standin.stop()


@pytest.fixture
def github_held(alice, channel, nova, team_a, github_api):
    grant(alice, nova, "github")
    connect("github", "tok-bot", BOT, workspace=team_a)
    return held_message(nova, channel, alice)


@pytest.fixture
def google_held(alice, channel, nova, team_a, google_api):
    google_api.add_token("tok-team", TEAM)
    grant(alice, nova, "google")
    connect("google", "tok-team", TEAM, workspace=team_a)
    return held_message(nova, channel, alice)


# ---- names from the model are path segments, never paths that climb out -------------------


@pytest.mark.parametrize(
    "tool, arguments",
    [
        # Resolved by the HTTP client to DELETE /repos/acme/app: the repository, not a branch.
        ("github_delete_branch", {"repo": "acme/app", "branch": "../../.."}),
        ("github_delete_branch", {"repo": "acme/app", "branch": "x/../../../../../user"}),
        ("github_read_file", {"repo": "acme/app", "path": "../../../../user"}),
        ("github_read_file", {"repo": "../user", "path": "x"}),
        ("github_create_branch", {"repo": "acme/app", "branch": "b", "from_branch": "../../../x"}),
    ],
)
def test_a_github_name_cannot_climb_to_another_endpoint(github_held, github_api, tool, arguments):
    error = github_held.error(tool, arguments)
    assert error["code"] == "github_name_invalid", error
    assert github_api.requests == []


@pytest.mark.parametrize(
    "tool, arguments",
    [
        # PATCH /calendar/v3/calendars/primary: the calendar itself, not an event.
        ("calendar_update_event", {"event_id": "..", "summary": "Pwned"}),
        ("gmail_read", {"id": ".."}),
        ("drive_read", {"file_id": "."}),
    ],
)
def test_a_google_id_cannot_climb_to_another_endpoint(google_held, google_api, tool, arguments):
    error = google_held.error(tool, arguments)
    assert error["code"] == "google_id_invalid", error
    assert google_api.requests == []


# ---- the provider's refusals become errors the model can act on ------------------------------


def refuse_all(standin, problem: Problem) -> None:
    """Every request to STANDIN answered with PROBLEM (its token is still checked)."""

    def route(*args):
        raise problem

    standin.route = route


def test_a_github_rate_limit_says_when_to_try_again(github_held, github_api):
    limit = github_error(429, "API rate limit exceeded for user ID 1.")
    limit.headers = {"Retry-After": "42"}
    refuse_all(github_api, limit)
    error = github_held.error("github_read_file", {"repo": "acme/app", "path": "README.md"})
    assert error["code"] == "github_refused"
    assert "API rate limit exceeded" in error["message"]
    assert "Try again in 42 seconds" in error["message"]


def test_githubs_primary_rate_limit_says_when_it_resets(github_held, github_api):
    """A 403 with no Retry-After, the limit's reset an epoch second in x-ratelimit-reset."""
    limit = github_error(403, "API rate limit exceeded for user ID 1.")
    limit.headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(time.time()) + 90)}
    refuse_all(github_api, limit)
    error = github_held.error("github_read_file", {"repo": "acme/app", "path": "README.md"})
    assert error["code"] == "github_refused"
    wait = re.search(r"Try again in (\d+) seconds", error["message"])
    assert wait is not None and 80 <= int(wait.group(1)) <= 90, error["message"]


def test_a_google_rate_limit_says_when_to_try_again(google_held, google_api):
    limit = google_error(429, "Quota exceeded for quota metric 'Queries'.", "rateLimitExceeded")
    limit.headers = {"Retry-After": "7"}
    refuse_all(google_api, limit)
    error = google_held.error("gmail_read", {"id": "18c"})
    assert error["code"] == "google_refused"
    assert "Quota exceeded" in error["message"] and "Try again in 7 seconds" in error["message"]


ODD_BODIES = [["upstream", "down"], "Bad gateway", 3]


@pytest.mark.parametrize("body", ODD_BODIES)
def test_a_github_server_error_with_an_odd_body_is_a_clear_refusal(github_held, github_api, body):
    """A gateway's 5xx whose JSON body is not an object: a refusal naming the status, not the
    tool failing 'unexpectedly on the server'."""
    refuse_all(github_api, Problem(502, body))
    error = github_held.error("github_read_file", {"repo": "acme/app", "path": "README.md"})
    assert error["code"] == "github_refused" and "(502)" in error["message"], error


@pytest.mark.parametrize("body", ODD_BODIES)
def test_a_google_server_error_with_an_odd_body_is_a_clear_refusal(google_held, google_api, body):
    refuse_all(google_api, Problem(503, body))
    error = google_held.error("gmail_read", {"id": "18c"})
    assert error["code"] == "google_refused" and "(503)" in error["message"], error


# ---- huge answers are not taken whole --------------------------------------------------------


def test_a_huge_drive_file_is_not_downloaded_whole(google_held, google_api):
    """A 3 MB text file: only its start is asked for (Drive's partial download), and the model
    is told it was cut and how big the file is."""
    huge = google_api.add_file(TEAM, "dump.txt", "text/plain", b"x" * 3_000_000)
    read = google_held.output("drive_read", {"file_id": huge})
    download = [r for r in google_api.requests if r.query.get("alt") == ["media"]]
    assert download[0].headers.get("Range", "").startswith("bytes=0-")
    assert len(read["text"]) == 20_000
    assert read["truncated"] == "cut at 20000 characters of a file of 3000000 bytes"


def test_a_small_drive_file_is_read_whole(google_held, google_api):
    """A guard of the partial download: small and empty files read as before."""
    small = google_api.add_file(TEAM, "notes.txt", "text/plain", "Ünïcode notes".encode())
    read = google_held.output("drive_read", {"file_id": small})
    assert read["text"] == "Ünïcode notes" and "truncated" not in read
    empty = google_api.add_file(TEAM, "empty.txt", "text/plain", b"")
    assert google_held.output("drive_read", {"file_id": empty})["text"] == ""


def test_a_sheet_of_long_cells_is_cut_by_its_text_not_only_its_cells(google_held, google_api):
    """200 cells of 45,000 characters each: under the 5,000-cell bound, yet 9 MB for the model.
    What it is given stops at the text bound, and says so."""
    rows = [[f"{n}:" + "y" * 45_000] for n in range(200)]
    sheet = google_api.add_sheet(TEAM, "Notes", {"Sheet1": rows})
    read = google_held.output("drive_read", {"file_id": sheet})
    kept = sum(len(cell) for row in read["values"] for cell in row)
    assert 0 < kept <= 100_000
    assert read["truncated"].startswith(f"first {len(read['values'])} of 200 rows")


# ---- a provider down while renewing is not a revoked grant (a guard: this already held) -------


@pytest.fixture
def auth_server():
    with AuthServer() as server:
        with override_settings(OAUTH_PROVIDERS={"google": server.provider_settings()}):
            yield server


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "outage",
    [
        (503, b"<html>Service Unavailable</html>"),
        (500, b'{"error": "internal_failure"}'),
        (503, b'{"error": "temporarily_unavailable"}'),
    ],
)
def test_a_token_endpoint_outage_does_not_ask_to_reconnect(alice, auth_server, outage):
    """Renewing meets a 5xx: the call fails saying so, and the connection stays good (only a
    refused grant, invalid_grant, needs the person to sign in again)."""
    issued = auth_server.issue()
    connection = Connection.objects.create(
        provider="google",
        user=alice,
        account="alice@example.com",
        access_ciphertext=crypto.encrypt(issued["access"]),
        refresh_ciphertext=crypto.encrypt(issued["refresh"]),
        expires_at=timezone.now() + timedelta(seconds=5),
    )
    auth_server.outage = outage
    with pytest.raises(connections.ProviderUnreachable) as failed:
        connections.access_token(connection)
    assert str(outage[0]) in failed.value.message
    connection.refresh_from_db()
    assert connection.status == Connection.Status.ACTIVE and connection.problem == ""
    auth_server.outage = None  # back up: the same connection renews
    assert connections.access_token(connection) != issued["access"]


# ---- an account disconnected while a call runs ---------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("refreshable", [False, True])
def test_an_account_disconnected_during_a_call_stops_it_clearly(
    alice, google_api, auth_server, refreshable
):
    """The person disconnects while a tool call is under way: the provider refuses the revoked
    token (401), and the call stops saying the account was disconnected, not that the tool
    'failed unexpectedly on the server'."""
    issued = auth_server.issue()
    connection = connect("google", "tok-revoked", "alice@example.com", user=alice)
    if refreshable:
        connection.refresh_ciphertext = crypto.encrypt(issued["refresh"])
        connection.save()
    Connection.objects.filter(pk=connection.pk).delete()  # disconnect() meanwhile
    with pytest.raises(connections.NotConnected) as stopped:
        connections.api_request(connection, "GET", f"{google_api.url}/gmail/v1/users/me/profile")
    assert "was disconnected" in stopped.value.message
    assert not Connection.objects.exists()


# ---- whose account: a direct conversation with another person in it ----------------------------


def test_a_group_direct_conversation_does_not_lend_a_persons_account_to_anothers_agent(
    alice, bob, team_a, nova, google_api
):
    """Alice, Bob and Alice's agent Nova in one direct conversation: Bob's plain message, handed
    to Nova, uses no account of Bob's (Alice set Nova's tools and reads its answers there), as
    in a channel. Bob naming Nova, or a direct conversation of Bob and Nova alone, does."""
    grant(alice, nova, "google")
    google_api.add_token("tok-bob", "bob@example.com")
    connect("google", "tok-bob", "bob@example.com", user=bob)
    group, _ = open_direct(alice, team_a, user_ids=[bob.id], agent_ids=[nova.id])
    plain = held_message(nova, group, bob, "Morning both")
    assert plain.error("gmail_search", {"q": "x"})["code"] == "not_connected"
    assert google_api.tokens_seen() == []
    named = held_message(nova, group, bob, "@nova search my mail")
    assert named.output("gmail_search", {"q": "x"})["account"] == "bob@example.com"
    alone, _ = open_direct(bob, team_a, agent_ids=[nova.id])
    mine = held_message(nova, alone, bob, "search my mail")
    assert mine.output("gmail_search", {"q": "x"})["account"] == "bob@example.com"
