"""The GitHub tools (INT-2): read a file, list / open / merge pull requests, create / delete a
branch, commit changes, through GitHub's REST API as the GitHub account the call resolves to
(``connections.account_for``: the workspace's, else the requesting person's). Not platform
tools: an owner grants them to an agent.

Reading is READ; writing to a repository is EXTERNAL; deleting a branch is DESTRUCTIVE. Both
ask a person first unless a standing permission says otherwise.
"""

import base64
import binascii
import time
from urllib.parse import quote

import httpx
from django.conf import settings

from agntchat.core.exceptions import AppError, NotFound
from integrations.connections import account_for, api_request, retry_note
from integrations.models import Connection
from work.models import Risk
from work.tools.registry import ToolContext, tool

HEADERS = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
MAX_TEXT = 20_000  # characters of a file the model is given
MAX_FILES = 50  # files in one commit


class GitHubNotFound(NotFound):
    code = "github_not_found"


class GitHubRefused(AppError):
    code = "github_refused"
    status = 502


class ChangesInvalid(AppError):
    code = "github_changes_invalid"


class NameInvalid(AppError):
    code = "github_name_invalid"


def segments(value: str) -> str:
    """VALUE (from the model: a repository, branch or path) as URL path segments, each quoted. A
    "." or ".." segment is refused: the HTTP client resolves it, so a "branch" ../../.. would
    DELETE the repository itself."""
    parts = value.split("/")
    if any(part in (".", "..") for part in parts):
        raise NameInvalid(f"{value!r} is not a valid name: it has a '.' or '..' segment.")
    return "/".join(quote(part, safe="") for part in parts)


class Repository:
    """One repository of the call's account: its API paths and the requests made on it."""

    def __init__(self, context: ToolContext, name: str):
        self.connection = account_for(context, "github")
        self.name = name
        self.base = f"{settings.GITHUB_API_BASE}/repos/{segments(name)}"

    def request(self, method: str, path: str, what: str, **options):
        """The JSON answer to METHOD on the repository's PATH (None when empty). WHAT names the
        thing asked for, for the model to read when it is not found."""
        response = api_request(
            self.connection, method, self.base + path, headers=dict(HEADERS), **options
        )
        checked(response, what, self.name, self.connection)
        return response.json() if response.content else None

    def head(self, branch: str) -> str:
        """The commit BRANCH points at."""
        found = self.request("GET", f"/git/ref/heads/{segments(branch)}", f"The branch {branch}")
        return found["object"]["sha"]

    def default_branch(self) -> str:
        return self.request("GET", "", "The repository")["default_branch"]


def checked(response: httpx.Response, what: str, repo: str, connection: Connection) -> None:
    """GitHub's refusal as an error the model can act on; nothing for a success."""
    if response.is_success:
        return
    if response.status_code == 404:
        raise GitHubNotFound(
            f"{what} was not found in {repo} (or the GitHub account {connection.account} "
            "cannot see it)."
        )
    try:
        data = response.json()
    except ValueError:
        data = {}
    if not isinstance(data, dict):  # a gateway's error body, not GitHub's
        data = {}
    message = data.get("message") or response.reason_phrase
    # A 422's details: "No commits between main and x", "Reference already exists"…
    details = [
        e.get("message") or e.get("code") for e in data.get("errors") or [] if isinstance(e, dict)
    ]
    details = [d for d in details if d and d != message]
    if details:
        message += ": " + "; ".join(details)
    raise GitHubRefused(
        f"GitHub refused ({response.status_code}): {message}"
        + (retry_note(response) or _reset_note(response))
    )


def _reset_note(response: httpx.Response) -> str:
    """GitHub's primary rate limit (a 403 or 429 with no Retry-After): when it resets (the
    epoch second in x-ratelimit-reset), for the model to read; else ""."""
    reset = response.headers.get("x-ratelimit-reset", "")
    if response.headers.get("x-ratelimit-remaining") != "0" or not reset.isdigit():
        return ""
    return f" Try again in {max(1, int(reset) - int(time.time()))} seconds."


REPO = {
    "type": "string",
    "pattern": "^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$",
    "maxLength": 200,
    "description": "owner/name",
}
BRANCH = {"type": "string", "minLength": 1, "maxLength": 250}


def github_tool(name: str, **options):
    """A tool acting on the GitHub account the call resolves to: granted by an owner, not to every
    agent."""
    return tool(name, connection="github", platform=False, **options)


@github_tool(
    "github_read_file",
    description=(
        "Read a file of a GitHub repository (owner/name) at a branch, tag or commit (the default "
        "branch if no ref), or list a directory."
    ),
    risk=Risk.READ,
    input_schema={
        "type": "object",
        "properties": {
            "repo": REPO,
            "path": {"type": "string", "maxLength": 1000},
            "ref": BRANCH,
        },
        "required": ["repo", "path"],
        "additionalProperties": False,
    },
)
def github_read_file(context: ToolContext, arguments: dict):
    repo, path = Repository(context, arguments["repo"]), arguments["path"].strip("/")
    params = {"ref": arguments["ref"]} if arguments.get("ref") else {}
    found = repo.request("GET", f"/contents/{segments(path)}", f"The path {path!r}", params=params)
    if isinstance(found, list):  # a directory
        return {"path": path, "entries": [{"name": e["name"], "type": e["type"]} for e in found]}
    if found.get("type") != "file":
        return {"path": path, "type": found.get("type"), "note": "Not a file: nothing to read."}
    if found.get("encoding") != "base64":  # GitHub leaves files over 1 MB out of this API
        return {"path": path, "size": found.get("size"), "note": "Too large to read here."}
    try:
        data = base64.b64decode(found.get("content", ""))
    except (binascii.Error, ValueError):
        data = b""
    out = {"path": found["path"], "sha": found["sha"], "size": found.get("size", len(data))}
    if b"\0" in data[:4096]:
        return {**out, "note": "A binary file: not shown."}
    text = data.decode("utf-8", errors="replace")
    if len(text) > MAX_TEXT:
        return {**out, "text": text[:MAX_TEXT], "truncated": f"cut at {MAX_TEXT} characters"}
    return {**out, "text": text}


def pull_out(pull: dict) -> dict:
    return {
        "number": pull["number"],
        "title": pull.get("title", ""),
        "state": pull.get("state"),
        "draft": pull.get("draft", False),
        "author": (pull.get("user") or {}).get("login"),
        "head": (pull.get("head") or {}).get("ref"),
        "base": (pull.get("base") or {}).get("ref"),
        "url": pull.get("html_url"),
        "updated_at": pull.get("updated_at"),
    }


@github_tool(
    "github_list_pull_requests",
    description="List the pull requests of a GitHub repository (open ones unless state says).",
    risk=Risk.READ,
    input_schema={
        "type": "object",
        "properties": {
            "repo": REPO,
            "state": {"enum": ["open", "closed", "all"], "default": "open"},
            "max": {"type": "integer", "minimum": 1, "maximum": 100, "default": 30},
        },
        "required": ["repo"],
        "additionalProperties": False,
    },
)
def github_list_pull_requests(context: ToolContext, arguments: dict):
    repo = Repository(context, arguments["repo"])
    params = {"state": arguments.get("state", "open"), "per_page": arguments.get("max", 30)}
    pulls = repo.request("GET", "/pulls", "The repository", params=params)
    return {"repo": repo.name, "pull_requests": [pull_out(p) for p in pulls]}


@github_tool(
    "github_open_pull_request",
    description=(
        "Open a pull request in a GitHub repository: the changes of branch head into branch base "
        "(the default branch if not given)."
    ),
    risk=Risk.EXTERNAL,
    input_schema={
        "type": "object",
        "properties": {
            "repo": REPO,
            "head": BRANCH,
            "base": BRANCH,
            "title": {"type": "string", "minLength": 1, "maxLength": 256},
            "body": {"type": "string", "maxLength": 60_000},
            "draft": {"type": "boolean", "default": False},
        },
        "required": ["repo", "head", "title"],
        "additionalProperties": False,
    },
)
def github_open_pull_request(context: ToolContext, arguments: dict):
    repo = Repository(context, arguments["repo"])
    body = {
        "title": arguments["title"],
        "head": arguments["head"],
        "base": arguments.get("base") or repo.default_branch(),
        "body": arguments.get("body", ""),
        "draft": arguments.get("draft", False),
    }
    pull = repo.request("POST", "/pulls", "The repository", json=body)
    return pull_out(pull)


@github_tool(
    "github_merge_pull_request",
    description=(
        "Merge a pull request of a GitHub repository by its number (merge, squash or rebase)."
    ),
    risk=Risk.EXTERNAL,
    input_schema={
        "type": "object",
        "properties": {
            "repo": REPO,
            "number": {"type": "integer", "minimum": 1},
            "merge_method": {"enum": ["merge", "squash", "rebase"], "default": "merge"},
            "commit_title": {"type": "string", "maxLength": 256},
        },
        "required": ["repo", "number"],
        "additionalProperties": False,
    },
)
def github_merge_pull_request(context: ToolContext, arguments: dict):
    repo, number = Repository(context, arguments["repo"]), arguments["number"]
    body = {"merge_method": arguments.get("merge_method", "merge")}
    if arguments.get("commit_title"):
        body["commit_title"] = arguments["commit_title"]
    merged = repo.request("PUT", f"/pulls/{number}/merge", f"The pull request #{number}", json=body)
    return {"number": number, "merged": merged.get("merged", False), "sha": merged.get("sha")}


@github_tool(
    "github_create_branch",
    description=(
        "Create a branch in a GitHub repository, starting where branch from_branch is now (the "
        "default branch if not given)."
    ),
    risk=Risk.EXTERNAL,
    input_schema={
        "type": "object",
        "properties": {"repo": REPO, "branch": BRANCH, "from_branch": BRANCH},
        "required": ["repo", "branch"],
        "additionalProperties": False,
    },
)
def github_create_branch(context: ToolContext, arguments: dict):
    repo, branch = Repository(context, arguments["repo"]), arguments["branch"]
    start = arguments.get("from_branch") or repo.default_branch()
    sha = repo.head(start)
    repo.request(
        "POST", "/git/refs", "The repository", json={"ref": f"refs/heads/{branch}", "sha": sha}
    )
    return {"branch": branch, "from": start, "sha": sha}


@github_tool(
    "github_delete_branch",
    description="Delete a branch of a GitHub repository (its commits stay reachable elsewhere).",
    risk=Risk.DESTRUCTIVE,
    input_schema={
        "type": "object",
        "properties": {"repo": REPO, "branch": BRANCH},
        "required": ["repo", "branch"],
        "additionalProperties": False,
    },
)
def github_delete_branch(context: ToolContext, arguments: dict):
    repo, branch = Repository(context, arguments["repo"]), arguments["branch"]
    repo.request("DELETE", f"/git/refs/heads/{segments(branch)}", f"The branch {branch}")
    return {"deleted": branch}


@github_tool(
    "github_commit_changes",
    description=(
        "Commit changes to several files of a GitHub repository, as one commit on an existing "
        "branch: each file's full new text, or delete: true to remove it."
    ),
    risk=Risk.EXTERNAL,
    timeout_seconds=90,
    input_schema={
        "type": "object",
        "properties": {
            "repo": REPO,
            "branch": BRANCH,
            "message": {"type": "string", "minLength": 1, "maxLength": 10_000},
            "files": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_FILES,
                "items": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "minLength": 1, "maxLength": 1000},
                        "content": {"type": "string", "maxLength": 1_000_000},
                        "delete": {"type": "boolean"},
                    },
                    "required": ["path"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["repo", "branch", "message", "files"],
        "additionalProperties": False,
    },
)
def github_commit_changes(context: ToolContext, arguments: dict):
    files = arguments["files"]
    for change in files:
        if ("content" in change) == bool(change.get("delete")):
            raise ChangesInvalid(f"{change['path']}: give either its content or delete: true.")
    repo, branch = Repository(context, arguments["repo"]), arguments["branch"]
    # Git's data API: blobs, a tree on top of the branch's, a commit of it, then the branch
    # moved to that commit (without force: a branch that moved meanwhile refuses, nothing lost).
    parent = repo.head(branch)
    base_tree = repo.request("GET", f"/git/commits/{parent}", f"The commit {parent}")["tree"]
    tree = []
    for change in files:
        path = change["path"].strip("/")
        if change.get("delete"):
            tree.append({"path": path, "mode": "100644", "type": "blob", "sha": None})
            continue
        blob = repo.request(
            "POST",
            "/git/blobs",
            "The repository",
            json={"content": change["content"], "encoding": "utf-8"},
        )
        tree.append({"path": path, "mode": "100644", "type": "blob", "sha": blob["sha"]})
    made = repo.request(
        "POST", "/git/trees", "The repository", json={"base_tree": base_tree["sha"], "tree": tree}
    )
    commit = repo.request(
        "POST",
        "/git/commits",
        "The repository",
        json={
            "message": arguments["message"],
            "tree": made["sha"],
            "parents": [parent],
        },
    )
    repo.request(
        "PATCH",
        f"/git/refs/heads/{segments(branch)}",
        f"The branch {branch}",
        json={"sha": commit["sha"], "force": False},
    )
    return {
        "branch": branch,
        "commit": commit["sha"],
        "url": commit.get("html_url"),
        "files": [change["path"] for change in files],
    }
