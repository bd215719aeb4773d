"""The GitHub tools against a local stand-in speaking GitHub's REST shapes (contents, pulls, the
Git data API): Nova, granted them by Alice, reads, branches, commits and merges on the account
the conversation resolves to (team A's, else the asking person's)."""

import json

import pytest
from asgiref.sync import sync_to_async

from conversations import actions as conversation_actions
from integrations.models import Connection
from tests.conftest import agent_session
from tests.integrations.google_github_standin import GitHubStandin, connect
from tests.socket_helpers import agent_communicator, frames_until, next_frame
from tests.work.tooling import held_message, held_task
from work.actions import set_agent_permission, set_tool_grant
from work.models import ToolCall
from work.tools.registry import REGISTRY

pytestmark = pytest.mark.django_db

BOT = "team-a-bot"
GITHUB_TOOLS = sorted(name for name, t in REGISTRY.items() if t.connection == "github")
FILES = {"README.md": "# App\n", "src/app.py": "print('hi')\n", "src/util.py": "X = 1\n"}


@pytest.fixture
def github_api(settings):
    standin = GitHubStandin().start()
    settings.GITHUB_API_BASE = standin.url
    standin.add_repo("acme/app", FILES, collaborators={BOT, "alice-gh"})
    yield standin
    standin.stop()


def grant(owner, agent, *, allow=True):
    for name in GITHUB_TOOLS:
        set_tool_grant(owner, agent, REGISTRY[name], True)
        if allow:
            set_agent_permission(owner, agent, REGISTRY[name], "allow")


@pytest.fixture
def team_github(github_api, alice, team_a, nova):
    """Team A's GitHub account (a bot login), connected for the workspace; Nova may use it."""
    github_api.add_token("tok-bot", BOT)
    grant(alice, nova)
    return connect("github", "tok-bot", BOT, workspace=team_a)


@pytest.fixture
def held(alice, channel, nova, team_github):
    return held_message(nova, channel, alice, "Over to you.")


def test_the_github_tools_are_granted_and_their_risks_ask_for_writes():
    assert {name: REGISTRY[name].risk for name in GITHUB_TOOLS} == {
        "github_commit_changes": "external",
        "github_create_branch": "external",
        "github_delete_branch": "destructive",
        "github_list_pull_requests": "read",
        "github_merge_pull_request": "external",
        "github_open_pull_request": "external",
        "github_read_file": "read",
    }
    assert not any(REGISTRY[name].platform for name in GITHUB_TOOLS)


def test_it_reads_a_file_and_lists_a_directory(held, github_api):
    read = held.output("github_read_file", {"repo": "acme/app", "path": "src/app.py"})
    assert (read["path"], read["text"], read["size"]) == ("src/app.py", "print('hi')\n", 12)
    listed = held.output("github_read_file", {"repo": "acme/app", "path": "src"})
    assert listed["entries"] == [
        {"name": "app.py", "type": "file"},
        {"name": "util.py", "type": "file"},
    ]
    request = github_api.requests[0]
    assert (request.method, request.path, request.token) == (
        "GET", "/repos/acme/app/contents/src/app.py", "tok-bot",
    )  # fmt: skip
    assert request.headers["Accept"] == "application/vnd.github+json"
    assert request.headers["X-GitHub-Api-Version"] == "2022-11-28"


def test_what_is_missing_or_hidden_is_not_found_naming_it(held, github_api):
    missing = held.error("github_read_file", {"repo": "acme/app", "path": "nope.txt"})
    assert missing == {
        "code": "github_not_found",
        "message": f"The path 'nope.txt' was not found in acme/app (or the GitHub account {BOT} "
        "cannot see it).",
    }
    github_api.add_repo("other/secret", {"a": "b"}, collaborators={"someone-else"})
    hidden = held.error("github_read_file", {"repo": "other/secret", "path": "a"})
    assert hidden["code"] == "github_not_found"


def test_it_creates_a_branch_from_the_default_branch(held, github_api):
    repo = github_api.repos["acme/app"]
    made = held.output("github_create_branch", {"repo": "acme/app", "branch": "feature/x"})
    assert made == {"branch": "feature/x", "from": "main", "sha": repo.refs["main"]}
    assert repo.refs["feature/x"] == repo.refs["main"]
    again = held.error("github_create_branch", {"repo": "acme/app", "branch": "feature/x"})
    assert again == {
        "code": "github_refused",
        "message": "GitHub refused (422): Reference already exists",
    }
    unknown = held.error(
        "github_create_branch", {"repo": "acme/app", "branch": "y", "from_branch": "nope"}
    )
    assert unknown["message"].startswith("The branch nope was not found in acme/app")


def test_it_commits_several_files_as_one_commit(held, github_api):
    repo = github_api.repos["acme/app"]
    held.output("github_create_branch", {"repo": "acme/app", "branch": "fix"})
    start = repo.refs["fix"]
    del github_api.requests[:]
    out = held.output("github_commit_changes", {
        "repo": "acme/app", "branch": "fix", "message": "Fix the greeting",
        "files": [
            {"path": "src/app.py", "content": "print('hello')\n"},
            {"path": "docs/notes.md", "content": "Notes\n"},
            {"path": "src/util.py", "delete": True},
        ],
    })  # fmt: skip
    commit = repo.commits[repo.refs["fix"]]
    assert out["commit"] == repo.refs["fix"]
    assert (commit["parents"], commit["message"]) == ([start], "Fix the greeting")
    assert github_api.file_at("acme/app", "fix", "src/app.py") == "print('hello')\n"
    assert github_api.file_at("acme/app", "fix", "docs/notes.md") == "Notes\n"
    assert github_api.file_at("acme/app", "fix", "src/util.py") is None
    assert github_api.file_at("acme/app", "fix", "README.md") == "# App\n"
    assert github_api.file_at("acme/app", "main", "src/app.py") == "print('hi')\n"
    assert [(r.method, r.path.split("/acme/app")[1]) for r in github_api.requests] == [
        ("GET", "/git/ref/heads/fix"),
        ("GET", f"/git/commits/{start}"),
        ("POST", "/git/blobs"),
        ("POST", "/git/blobs"),
        ("POST", "/git/trees"),
        ("POST", "/git/commits"),
        ("PATCH", "/git/refs/heads/fix"),
    ]
    assert github_api.requests[-1].body["force"] is False


def test_a_change_naming_neither_content_nor_delete_is_refused_before_github(held, github_api):
    error = held.error("github_commit_changes", {
        "repo": "acme/app", "branch": "main", "message": "x", "files": [{"path": "a"}],
    })  # fmt: skip
    assert error["code"] == "github_changes_invalid"
    assert github_api.requests == []


def test_pull_requests_are_opened_listed_and_merged(held, github_api):
    repo = github_api.repos["acme/app"]
    held.output("github_create_branch", {"repo": "acme/app", "branch": "fix"})
    empty = held.error(
        "github_open_pull_request", {"repo": "acme/app", "head": "fix", "title": "Fix"}
    )
    assert empty["message"] == (
        "GitHub refused (422): Validation Failed: No commits between main and fix"
    )
    held.output("github_commit_changes", {
        "repo": "acme/app", "branch": "fix", "message": "Fix",
        "files": [{"path": "README.md", "content": "# App, fixed\n"}],
    })  # fmt: skip
    opened = held.output(
        "github_open_pull_request",
        {"repo": "acme/app", "head": "fix", "title": "Fix the README", "body": "Small."},
    )
    assert (opened["number"], opened["base"], opened["author"]) == (1, "main", BOT)
    assert opened["url"] == "https://github.com/acme/app/pull/1"
    listed = held.output("github_list_pull_requests", {"repo": "acme/app"})
    assert [(p["number"], p["title"], p["head"]) for p in listed["pull_requests"]] == [
        (1, "Fix the README", "fix")
    ]
    merged = held.output(
        "github_merge_pull_request", {"repo": "acme/app", "number": 1, "merge_method": "squash"}
    )
    assert merged == {"number": 1, "merged": True, "sha": repo.refs["main"]}
    assert github_api.file_at("acme/app", "main", "README.md") == "# App, fixed\n"
    assert held.output("github_list_pull_requests", {"repo": "acme/app"})["pull_requests"] == []
    twice = held.error("github_merge_pull_request", {"repo": "acme/app", "number": 1})
    assert twice["message"] == "GitHub refused (405): Pull Request is not mergeable"
    gone = held.error("github_merge_pull_request", {"repo": "acme/app", "number": 9})
    assert gone["message"].startswith("The pull request #9 was not found in acme/app")


def test_it_deletes_a_branch(held, github_api):
    repo = github_api.repos["acme/app"]
    held.output("github_create_branch", {"repo": "acme/app", "branch": "old/work"})
    assert held.output("github_delete_branch", {"repo": "acme/app", "branch": "old/work"}) == {
        "deleted": "old/work"
    }
    assert "old/work" not in repo.refs and "main" in repo.refs
    again = held.error("github_delete_branch", {"repo": "acme/app", "branch": "old/work"})
    assert again["message"] == "GitHub refused (422): Reference does not exist"


def test_deleting_a_branch_asks_a_person_by_default(alice, channel, nova, team_a, github_api):
    github_api.add_token("tok-bot", BOT)
    connect("github", "tok-bot", BOT, workspace=team_a)
    grant(alice, nova, allow=False)
    held = held_message(nova, channel, alice)
    answer = held.call("github_delete_branch", {"repo": "acme/app", "branch": "main"})
    assert not answer.ok and answer.pending is not None
    assert ToolCall.objects.get(tool="github_delete_branch").status == "waiting"
    assert github_api.requests == []
    assert "main" in github_api.repos["acme/app"].refs


def test_the_same_agent_uses_each_workspaces_account(alice, channel, nova, team_github, github_api):
    github_api.add_token("tok-alice", "alice-gh")
    connect("github", "tok-alice", "alice-gh", user=alice)
    personal = alice.owned_workspaces.get(kind="personal")

    in_team = held_message(nova, channel, alice)
    opened_in_team = in_team.output("github_create_branch", {"repo": "acme/app", "branch": "a"})
    team_tokens = github_api.tokens_seen()
    del github_api.requests[:]
    in_personal = held_task(nova, personal, alice, "Make me a branch.")
    in_personal.output("github_create_branch", {"repo": "acme/app", "branch": "b"})

    assert opened_in_team["branch"] == "a"
    assert set(team_tokens) == {"tok-bot"}
    assert set(github_api.tokens_seen()) == {"tok-alice"}


@pytest.mark.django_db(transaction=True)
def test_a_refused_token_turns_into_a_reconnect_message(alice, channel, nova, github_api):
    grant(alice, nova)
    connection = connect("github", "tok-revoked", "alice-gh", user=alice)
    error = held_message(nova, channel, alice).error(
        "github_read_file", {"repo": "acme/app", "path": "README.md"}
    )
    assert error["code"] == "reconnect_needed"
    assert "The GitHub account alice-gh needs to be connected again" in error["message"]
    connection.refresh_from_db()
    assert connection.status == Connection.Status.RECONNECT
    assert github_api.tokens_seen() == ["tok-revoked"]


@pytest.mark.django_db(transaction=True)
async def test_a_tool_call_frame_reads_a_file_through_the_socket(alice, channel, nova, github_api):
    await sync_to_async(github_api.add_token)("tok-bot", BOT)
    await sync_to_async(grant)(alice, nova)
    await sync_to_async(connect)("github", "tok-bot", BOT, workspace=channel.workspace)
    comm = agent_communicator(await sync_to_async(agent_session)(nova))
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    await sync_to_async(conversation_actions.post_message)(alice, channel, "What's in README?")
    work = await next_frame(comm)
    await comm.send_json_to({
        "type": "tool.call", "id": work["id"], "callId": "c-read", "name": "github_read_file",
        "input": {"repo": "acme/app", "path": "README.md", "ref": "main"},
    })  # fmt: skip
    seen = await frames_until(comm, lambda f: f.get("callId") == "c-read", timeout=10)
    result = seen[-1]
    assert result["type"] == "tool.result" and result["ok"] is True, result
    assert json.loads(result["output"])["text"] == "# App\n"
    assert github_api.requests[0].query == {"ref": ["main"]}
    await comm.disconnect()
