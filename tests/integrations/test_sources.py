"""Outside tool sources (issue 24): a real MCP server (the official SDK's, over Streamable HTTP)
and a stand-in HTTP API, added by a workspace's admin, imported, granted to an agent and called
through the real call path and the real agent socket."""

import functools
import gzip
import json
import socket
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import uvicorn
from asgiref.sync import sync_to_async
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from conversations.actions import create_conversation, post_message
from integrations import sources
from integrations.models import SourceGrant, ToolSource
from tests.conftest import agent_session
from tests.socket_helpers import (
    agent_communicator,
    change_heard,
    frames_until,
    next_frame,
    settled,
)
from tests.work.tooling import held_message
from work import actions as work_actions
from work.models import ToolCall
from work.tools.registry import agent_tools, granted_tools
from workspaces import actions as workspace_actions

SECRET = "s3cret-crm-token"


class McpStandin:
    """The official SDK's MCP server on a free port, in a thread: a key-value store the test
    can look into, and the headers of every request it was sent."""

    def __init__(self):
        self.store: dict[str, str] = {"colour": "teal"}
        self.headers: list[dict] = []
        server = MCPServer("crm-standin")

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        def lookup(key: str) -> str:
            """Look up the value stored under a key."""
            return self.store.get(key, "(nothing)")

        @server.tool()
        def remember(key: str, value: str) -> str:
            """Store a value under a key."""
            self.store[key] = value
            return f"stored {key}"

        @server.tool()
        def explode() -> str:
            """Always fails."""
            raise ToolError("the widget broke: no widgets left")

        @server.tool()
        def wipe() -> str:
            """Forget everything (never granted in these tests)."""
            self.store.clear()
            return "wiped"

        app = server.streamable_http_app()

        async def recording(scope, receive, send):
            if scope["type"] == "http":
                self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
            await app(scope, receive, send)

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/mcp"
        config = uvicorn.Config(recording, log_level="warning", lifespan="on", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def start(self):
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "the MCP stand-in did not start"
            time.sleep(0.02)
        return self

    def stop(self):
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@functools.cache
def zipped_export() -> bytes:
    """128 MB of JSON in 128 KB of gzip (made once, before any test measures memory)."""
    return gzip.compress(b'{"rows": "' + b"a" * (128 << 20) + b'"}', 9)


class HttpStandin:
    """An HTTP API that answers every request with JSON and records what it was sent."""

    def __init__(self):
        self.seen: list[tuple[str, str, dict]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self):
                owner.seen.append((self.command, self.path, dict(self.headers)))
                body = json.dumps({"path": self.path, "items": [1, 2]}).encode()
                zipped = "/export" in self.path
                if zipped:
                    body = zipped_export()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                if zipped:
                    self.send_header("content-encoding", "gzip")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/api"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def mcp_server():
    server = McpStandin().start()
    yield server
    server.stop()


@pytest.fixture
def crm(mcp_server):
    mcp_server.store.clear()
    mcp_server.store["colour"] = "teal"
    mcp_server.headers.clear()
    return mcp_server


@pytest.fixture
def http_api():
    server = HttpStandin()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def local_servers_allowed(settings):
    """The stand-ins listen on 127.0.0.1, which sources refuse unless the operator allows it."""
    settings.WEB_FETCH_ALLOW_PRIVATE = True


def admin_of(workspace, user):
    return workspace.memberships.get(user=user)


def add_crm(alice, team_a, url, name="crm"):
    membership = admin_of(team_a, alice)
    credential = workspace_actions.create_credential(membership, f"{name}-token", SECRET)
    source = sources.add_source(membership, kind="mcp", name=name, url=url, credential=credential)
    return sources.import_tools(membership, source)


def grant(alice, team_a, source, agent, *functions):
    for function in functions:
        sources.grant_function(admin_of(team_a, alice), source, agent, function)


def allow(alice, team_a, tool):
    work_actions.set_workspace_permission(admin_of(team_a, alice), tool=tool, decision="allow")


# ---- MCP: import, grant, call ----------------------------------------------------------------


def test_import_reads_the_servers_tools_with_their_risk(alice, team_a, crm):
    source = add_crm(alice, team_a, crm.url)
    assert source.problem == ""
    by_name = {f["name"]: f for f in source.functions}
    assert set(by_name) == {"lookup", "remember", "explode", "wipe"}
    assert by_name["lookup"]["risk"] == "read" and by_name["remember"]["risk"] == "external"
    assert by_name["lookup"]["tool"] == "crm__lookup"
    assert by_name["remember"]["input_schema"]["required"] == ["key", "value"]
    # The credential went as the auth header.
    assert crm.headers and all(h.get("authorization") == f"Bearer {SECRET}" for h in crm.headers)


def test_granted_tools_cost_one_query_more_and_stay_in_name_order(
    alice, team_a, nova, crm, django_assert_num_queries
):
    with django_assert_num_queries(2):  # the tool grants, and the source grants
        names = [t.name for t in granted_tools(nova)]
    source = add_crm(alice, team_a, crm.url)
    grant(alice, team_a, source, nova, "lookup", "remember")
    with_sources = [t.name for t in granted_tools(nova)]
    assert with_sources == sorted(names + ["crm__lookup", "crm__remember"])
    tool = next(t for t in granted_tools(nova) if t.name == "crm__lookup")
    assert tool.workspace_id == team_a.id and "Team A" in tool.description


def test_a_stopped_server_tells_the_model_nothing_was_done(alice, team_a, nova, channel, bob):
    server = McpStandin().start()
    source = add_crm(alice, team_a, server.url, name="flaky")
    grant(alice, team_a, source, nova, "lookup")
    server.stop()
    error = held_message(nova, channel, bob).error("flaky__lookup", {"key": "colour"})
    assert error["code"] == "tool_source_unreachable"
    assert "MCP server flaky could not be reached" in error["message"]
    assert "nothing was done" in error["message"]
    # Importing again says so too, and keeps the functions last imported.
    again = sources.import_tools(admin_of(team_a, alice), source)
    assert "could not be reached" in again.problem and len(again.functions) == 4


def test_an_ungranted_function_is_refused(alice, team_a, nova, channel, bob, crm):
    source = add_crm(alice, team_a, crm.url)
    grant(alice, team_a, source, nova, "lookup")
    error = held_message(nova, channel, bob).error("crm__wipe")
    assert error["code"] == "tool_not_granted"
    assert crm.store == {"colour": "teal"}


def test_another_workspaces_tool_is_not_used_here(alice, team_a, nova, channel, bob, crm):
    source = add_crm(alice, team_a, crm.url)
    grant(alice, team_a, source, nova, "lookup", "remember")
    allow(alice, team_a, "crm__remember")
    # Nova appears in Alice's other team too: there, team A's server is never used.
    team_c = workspace_actions.create_team_workspace(alice, "Team C")
    elsewhere = create_conversation(
        alice, team_c, kind="channel", title="c", user_ids=[], agent_ids=[nova.id]
    )
    crm.headers.clear()
    held = held_message(nova, elsewhere, alice)
    error = held.error("crm__remember", {"key": "k", "value": "v"})
    assert error["code"] == "tool_not_here" and "another workspace" in error["message"]
    assert crm.headers == [] and "k" not in crm.store
    # In team A it runs.
    assert held_message(nova, channel, bob).call("crm__remember", {"key": "k", "value": "v"}).ok
    assert crm.store["k"] == "v"


@pytest.mark.django_db(transaction=True)
async def test_calls_through_the_agent_socket(alice, bob, team_a, nova, channel, crm):
    source = await sync_to_async(add_crm)(alice, team_a, crm.url)
    await sync_to_async(grant)(alice, team_a, source, nova, "lookup", "explode")
    await sync_to_async(allow)(alice, team_a, "crm__explode")
    token = await sync_to_async(agent_session)(nova)
    comm = agent_communicator(token)
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"

    await sync_to_async(post_message)(bob, channel, "first")
    first = await next_frame(comm)
    offered = [t["name"] for t in first["payload"]["directives"]["tools"]]
    assert "crm__lookup" in offered and "crm__remember" not in offered
    await comm.send_json_to({"type": "ack", "id": first["id"]})
    await settled(comm, ack=first["id"])

    # Granted while connected: the socket reads its tools again (agent.changed).
    await sync_to_async(grant)(alice, team_a, source, nova, "remember")
    await sync_to_async(allow)(alice, team_a, "crm__remember")
    await change_heard(comm)
    await sync_to_async(post_message)(bob, channel, "please")
    seen = await frames_until(comm, lambda f: f["type"] == "work")
    work = seen[-1]
    offered = [t["name"] for t in work["payload"]["directives"]["tools"]]
    assert {"crm__lookup", "crm__remember", "crm__explode"} <= set(offered)
    assert "crm__wipe" not in offered
    schema = next(t for t in work["payload"]["directives"]["tools"] if t["name"] == "crm__remember")
    assert schema["inputSchema"]["required"] == ["key", "value"]

    async def call(call_id, name, arguments):
        await comm.send_json_to(
            {"type": "tool.call", "id": work["id"], "callId": call_id, "name": name,
             "input": arguments}
        )  # fmt: skip
        seen = await frames_until(comm, lambda f: f.get("callId") == call_id, timeout=15)
        return seen[-1]

    stored = await call("c-1", "crm__remember", {"key": "city", "value": "Lisbon"})
    assert stored["ok"] is True and stored["output"] == "stored city"
    assert crm.store["city"] == "Lisbon"
    read = await call("c-2", "crm__lookup", {"key": "city"})
    assert read["ok"] is True and read["output"] == "Lisbon"
    failed = await call("c-3", "crm__explode", {})
    assert failed["ok"] is False and failed["error"]["code"] == "tool_source_error"
    assert "the widget broke: no widgets left" in failed["error"]["message"]
    assert all(h.get("authorization") == f"Bearer {SECRET}" for h in crm.headers)
    calls = {c.call_id: c.status async for c in ToolCall.objects.filter(agent=nova)}
    assert calls == {"c-1": "succeeded", "c-2": "succeeded", "c-3": "failed"}
    await comm.disconnect()


def test_taking_a_grant_away_takes_the_tool_away(alice, team_a, nova, crm):
    source = add_crm(alice, team_a, crm.url)
    grant(alice, team_a, source, nova, "lookup")
    assert "crm__lookup" in [t.name for t in agent_tools(nova)]
    sources.take_away_function(admin_of(team_a, alice), source, nova, "lookup")
    assert "crm__lookup" not in [t.name for t in granted_tools(nova)]


# ---- HTTP APIs ---------------------------------------------------------------------------------


def add_http(alice, team_a, url):
    membership = admin_of(team_a, alice)
    credential = workspace_actions.create_credential(membership, "items-token", SECRET)
    return sources.add_source(
        membership, kind="http", name="items", url=url, credential=credential,
        auth_header="X-Api-Key", auth_scheme="", methods=["GET"], paths=["/v1/items/*"],
    )  # fmt: skip


def test_an_http_api_sends_only_what_is_allowed(alice, team_a, nova, channel, bob, http_api):
    source = add_http(alice, team_a, http_api.url)
    grant(alice, team_a, source, nova, "request")
    allow(alice, team_a, "items__request")
    held = held_message(nova, channel, bob)
    answer = held.output("items__request", {"method": "GET", "path": "/v1/items/42",
                                            "query": {"full": True}})  # fmt: skip
    assert (
        answer["status"] == 200
        and json.loads(answer["body"])["path"] == "/api/v1/items/42?full=true"
    )
    ((method, path, headers),) = http_api.seen
    assert (method, path, headers["X-Api-Key"]) == ("GET", "/api/v1/items/42?full=true", SECRET)

    refused = [
        ({"method": "POST", "path": "/v1/items/42"}, "tool_input_invalid"),  # not an allowed method
        ({"method": "GET", "path": "/v1/admin"}, "tool_source_refused"),
        ({"method": "GET", "path": "/v1/items/../../admin"}, "tool_source_refused"),
        ({"method": "GET", "path": "/v1/items/%2e%2e/admin"}, "tool_source_refused"),
        ({"method": "GET", "path": "/v1/items/1?admin=1"}, "tool_source_refused"),
    ]
    for arguments, code in refused:
        error = held.error("items__request", arguments)
        assert error["code"] == code, (arguments, error)
    assert (
        "matches none of the paths allowed"
        in held.error("items__request", {"method": "GET", "path": "/v2/items/1"})["message"]
    )
    assert len(http_api.seen) == 1  # nothing more was sent


def test_an_http_apis_compressed_answer_is_inflated_no_further_than_it_is_read(
    alice, team_a, nova, channel, bob, http_api
):
    source = add_http(alice, team_a, http_api.url)
    grant(alice, team_a, source, nova, "request")
    allow(alice, team_a, "items__request")
    held = held_message(nova, channel, bob)
    zipped_export()
    tracemalloc.start()
    try:
        answer = held.output("items__request", {"method": "GET", "path": "/v1/items/export"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert answer["truncated"] is True and answer["body"].startswith('{"rows": "aaa')
    assert len(answer["body"]) == sources.MAX_RESPONSE_CHARS
    assert peak < 8 * sources.MAX_RESPONSE_BYTES, peak  # not the 128 MB it inflates to


def test_a_method_taken_off_the_list_is_refused_before_sending(alice, team_a, http_api):
    source = add_http(alice, team_a, http_api.url)
    source.methods = ["GET", "DELETE"]
    assert sources.request_refusal(source, "DELETE", "/v1/items/1") is None
    source.methods = ["GET"]
    assert "DELETE is not allowed" in sources.request_refusal(source, "DELETE", "/v1/items/1")


def test_private_addresses_are_refused_unless_allowed(
    alice, team_a, nova, channel, bob, http_api, settings
):
    source = add_http(alice, team_a, http_api.url)
    grant(alice, team_a, source, nova, "request")
    allow(alice, team_a, "items__request")
    settings.WEB_FETCH_ALLOW_PRIVATE = False
    error = held_message(nova, channel, bob).error(
        "items__request", {"method": "GET", "path": "/v1/items/1"}
    )
    assert error["code"] == "tool_source_unreachable" and http_api.seen == []


# ---- REST ------------------------------------------------------------------------------------


def test_the_api_adds_imports_grants_and_removes(
    api, alice, bob, charlie, team_a, team_b, nova, crm
):
    credential = workspace_actions.create_credential(admin_of(team_a, alice), "crm", SECRET)
    client = api(alice)
    base = f"/api/v1/workspaces/{team_a.id}/tool-sources/"
    made = client.post(base, {"kind": "mcp", "name": "crm", "url": crm.url,
                              "credential": str(credential.id)}, format="json")  # fmt: skip
    assert made.status_code == 201, made.json()
    body = made.json()
    assert body["credential"] == {"id": str(credential.id), "name": "crm"}
    assert {f["tool"] for f in body["functions"]} >= {"crm__lookup", "crm__remember"}
    assert SECRET not in made.content.decode()
    one = f"/api/v1/tool-sources/{body['id']}/"
    assert client.get(base).json()["results"][0]["name"] == "crm"
    assert client.get(one).json()["timeoutSeconds"] == 30
    changed = client.patch(one, {"timeoutSeconds": 10, "description": "The CRM."}, format="json")
    assert changed.status_code == 200 and changed.json()["timeoutSeconds"] == 10
    assert client.post(one + "import/").json()["problem"] is None
    granted = client.post(one + "grants/", {"agent": str(nova.id), "function": "lookup"},
                          format="json")  # fmt: skip
    assert granted.status_code == 201 and granted.json()["function"] == "lookup"
    assert [g["agentId"] for g in client.get(one + "grants/").json()["results"]] == [str(nova.id)]

    # Another workspace's person: every endpoint is simply not found, and nothing changes.
    outsider = api(charlie)
    grant_query = f"?agent={nova.id}&function=lookup"
    for method, url, data in [
        ("get", base, None), ("post", base, {"kind": "mcp", "name": "x", "url": crm.url}),
        ("get", one, None), ("patch", one, {"description": "mine"}), ("delete", one, None),
        ("post", one + "import/", None), ("get", one + "grants/", None),
        ("post", one + "grants/", {"agent": str(nova.id), "function": "remember"}),
        ("delete", one + "grants/" + grant_query, None),
    ]:  # fmt: skip
        response = getattr(outsider, method)(url, data, format="json")
        assert response.status_code == 404, (method, url, response.content)
    # A member who is not an admin may not change sources.
    assert api(bob).post(base, {"kind": "mcp", "name": "b", "url": crm.url},
                         format="json").status_code == 403  # fmt: skip
    assert ToolSource.objects.count() == 1 and SourceGrant.objects.count() == 1

    assert client.delete(one + "grants/" + grant_query).status_code == 204
    assert client.delete(one + "grants/" + grant_query).status_code == 404
    assert client.delete(one).status_code == 204
    assert ToolSource.objects.count() == 0


def test_the_api_refuses_bad_input_and_changes_nothing(
    api, alice, charlie, team_a, team_b, nova, http_api
):
    client = api(alice)
    base = f"/api/v1/workspaces/{team_a.id}/tool-sources/"
    good = {"kind": "http", "name": "items", "url": http_api.url, "methods": ["GET"],
            "paths": ["/v1/*"]}  # fmt: skip
    other_credential = workspace_actions.create_credential(admin_of(team_b, charlie), "x", "y")
    bad = [
        ({**good, "name": "Items"}, 400),
        ({**good, "name": "9lives"}, 400),
        ({**good, "kind": "ftp"}, 400),
        ({**good, "url": "ftp://example.com"}, 400),
        ({**good, "paths": []}, 400),
        ({**good, "paths": ["v1/*"]}, 400),
        ({**good, "methods": ["TRACE"]}, 400),
        ({**good, "timeoutSeconds": 0}, 400),
        ({**good, "authHeader": "Bad Header"}, 400),
        ({**good, "surprise": 1}, 400),
        ({**good, "credential": str(other_credential.id)}, 404),
    ]
    for data, status in bad:
        response = client.post(base, data, format="json")
        assert response.status_code == status, (data, response.json())
        assert response.json()["error"]["code"]
    assert ToolSource.objects.count() == 0
    made = client.post(base, good, format="json")
    assert made.status_code == 201 and made.json()["functions"][0]["tool"] == "items__request"
    assert client.post(base, good, format="json").status_code == 409  # the name is taken
    one = f"/api/v1/tool-sources/{made.json()['id']}/"
    assert client.patch(one, {}, format="json").status_code == 400
    assert client.patch(one, {"paths": ["nope"]}, format="json").status_code == 400
    assert client.post(one + "import/").status_code == 400  # an HTTP API has nothing to import
    for data in (
        {"agent": str(nova.id), "function": "nope"},
        {"agent": "x", "function": "request"},
    ):
        assert client.post(one + "grants/", data, format="json").status_code == 400
    assert client.delete(one + "grants/?agent=x").status_code == 400
    assert ToolSource.objects.get().paths == ["/v1/*"] and SourceGrant.objects.count() == 0


# ---- the page ---------------------------------------------------------------------------------


def test_the_page_shows_sources_to_admins_only(client, alice, bob, team_a, nova, crm):
    source = add_crm(alice, team_a, crm.url)
    grant(alice, team_a, source, nova, "lookup")
    client.force_login(alice)
    page = client.get(f"/w/{team_a.id}/tool-sources/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-source="crm"' in html and "crm__lookup" in html and "crm__wipe" in html
    assert f"/api/v1/tool-sources/{source.id}/grants/?agent={nova.id}&amp;function=lookup" in html
    assert "Add a tool source" in html and SECRET not in html
    client.force_login(bob)
    assert client.get(f"/w/{team_a.id}/tool-sources/").status_code == 404
