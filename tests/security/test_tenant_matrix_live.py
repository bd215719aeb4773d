"""The tenant matrix on the sockets and the fronts (issue 27): every frame of the browser socket
(/ws/live/) and the agent socket (/ws/agent/) naming Alice's rows, from Charlie and from his
agent Spy, answers an ``error`` frame and writes nothing; a revoked token, an expired session or
a host token opens neither socket; the host supervisors' socket (/ws/host/) opens only for a live
supervisor token or a person's API token, and then hears of none of team A's agents; /v1 and
/mcp show none of team A's agents to an intruder."""

import json

import pytest
from asgiref.sync import async_to_sync
from channels.testing import HttpCommunicator, WebsocketCommunicator

from agntchat.asgi import application
from tests.security.world import build_world, changed, checksum, tables_checksum_sql
from tests.socket_helpers import agent_communicator, drain, live_socket_for, next_frame

# Sockets run their queries on other threads' connections: the world is committed, built once
# per test (a few tests, each going through every frame).
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world():
    return build_world()


@pytest.fixture
def checksum_sql(world):
    return tables_checksum_sql()


def agent_frames(world) -> dict:
    """Every agent frame that names a conversation, message, task or artifact: all Alice's."""
    ids = {k: str(v) for k, v in world.ids.items()}
    conversation, message, task = ids["conversation_id"], ids["message_id"], ids["task_id"]
    return {
        "post": {"conversationId": conversation, "body": "I am in."},
        "done": {"conversationId": conversation},
        "thread.resolve": {"conversationId": conversation, "summary": "closed by a stranger"},
        "ack": {"id": message, "done": True},
        "extend": {"id": task},
        "event": {"id": task, "event": {"kind": "progress", "text": "x"}},
        "result": {"id": task, "status": "completed", "result": {"text": "stolen"}},
        "tool.call": {"id": message, "callId": "c1", "name": "artifact_publish", "input": {}},
        "artifact.publish": {
            "conversationId": conversation,
            "title": "Fake",
            "kind": "markdown",
            "content": "# fake",
        },
        "artifact.update": {"artifactId": ids["artifact_id"], "content": "# overwritten"},
        "card.post": {"conversationId": conversation, "card": {"title": "x"}},
        "draft": {"id": message, "text": "a stranger's draft"},
    }


AGENT_FRAME_TYPES = [
    "post",
    "done",
    "thread.resolve",
    "ack",
    "extend",
    "event",
    "result",
    "tool.call",
    "artifact.publish",
    "artifact.update",
    "card.post",
    "draft",
]


def test_every_agent_frame_naming_a_conversation_is_in_the_list():
    from work.consumers import AgentSocket

    # Frames that name nothing of anyone else's: the agent's own settings and session.
    own = {"heartbeat", "configure", "personality.get", "personality.set", "session.renew"}
    assert set(AgentSocket.handlers) - own == set(AGENT_FRAME_TYPES)


def test_an_agent_outside_the_conversation_gets_an_error_and_writes_nothing(world, checksum_sql):
    async def attempt(frame):
        comm = agent_communicator(world.secrets["foreign_agent"])
        assert (await comm.connect())[0]
        await drain(comm)  # hello and whatever work Spy has (none)
        before = await database(checksum)(checksum_sql)
        await comm.send_json_to(frame)
        answer = await next_frame(comm)
        frames = await drain(comm)
        after = await database(checksum)(checksum_sql)
        await comm.disconnect()
        return answer, frames, changed(before, after)

    failures = []
    for frame_type, fields in agent_frames(world).items():
        answer, more, diff = async_to_sync(attempt)({"type": frame_type, **fields})
        code = answer.get("code", "")
        refused = answer["type"] == "error" and (code.endswith("not_found") or code == "not_held")
        if not refused or more or diff:
            failures.append((frame_type, answer, more, diff))
    assert not failures, "\n".join(map(str, failures))


def test_no_agent_socket_without_a_live_session(world, checksum_sql):
    async def attempt(secret):
        before = await database(checksum)(checksum_sql)
        comm = agent_communicator(secret)
        assert (await comm.connect())[0]
        refusal = await next_frame(comm)
        closed = await comm.receive_output(timeout=3)
        await ended(comm)
        after = await database(checksum)(checksum_sql)
        return refusal, closed, changed(before, after)

    for who in ("revoked_token", "expired_session", "host_token", "outsider"):
        refusal, closed, diff = async_to_sync(attempt)(world.secrets[who])
        assert (refusal["type"], refusal["code"]) == ("error", "unauthorized"), who
        assert closed == {"type": "websocket.close", "code": 4401}, who
        assert diff == {}, who


async def ended(comm) -> None:
    """The client answers the close, as daphne tells the application it did, and the refused
    socket's application ends (wait() alone would just time out, silently)."""
    await comm.send_input({"type": "websocket.disconnect", "code": 4401})
    await comm.wait(timeout=3)
    assert comm.future.done() and not comm.future.cancelled()


def database(function):
    from channels.db import database_sync_to_async

    return database_sync_to_async(function)


def test_typing_in_a_foreign_conversation_is_an_error_and_reaches_no_one(world, checksum_sql):
    for who in ("dora", "charlie"):
        typing_is_refused(world, checksum_sql, getattr(world, who))


def typing_is_refused(world, checksum_sql, intruder):
    async def attempt():
        alice = await live_socket_for(world.alice)
        comm = await live_socket_for(intruder)
        before = await database(checksum)(checksum_sql)
        await comm.send_json_to(
            {"type": "typing", "conversationId": str(world.ids["conversation_id"])}
        )
        answer = await next_frame(comm)
        # An unknown frame type ("subscribe" to a topic) is refused too, and no topic is joined.
        await comm.send_json_to({"type": "subscribe", "topic": f"workspace.{world.team_a.id}"})
        refused = await next_frame(comm)
        heard_by_alice = await drain(alice)
        after = await database(checksum)(checksum_sql)
        await comm.disconnect()
        await alice.disconnect()
        return answer, refused, heard_by_alice, changed(before, after)

    answer, refused, heard, diff = async_to_sync(attempt)()
    assert (answer["type"], answer["code"]) == ("error", "conversation_not_found")
    assert refused["type"] == "error"
    assert heard == [] and diff == {}


def test_a_message_in_team_a_reaches_no_intruder_s_browser(world):
    from conversations.actions import post_message

    async def attempt():
        intruders = [await live_socket_for(world.dora), await live_socket_for(world.charlie)]
        alice = await live_socket_for(world.alice)
        await database(post_message)(world.bob, world.channel, "Only for team A")
        heard_by_alice = await drain(alice, quiet=1)
        heard = [await drain(comm) for comm in intruders]
        for comm in [*intruders, alice]:
            await comm.disconnect()
        return heard_by_alice, heard

    heard_by_alice, heard = async_to_sync(attempt)()
    assert any("Only for team A" in json.dumps(f) for f in heard_by_alice)  # the test can fail
    assert heard == [[], []]


def test_no_live_socket_without_a_session(world):
    async def attempt():
        comm = WebsocketCommunicator(
            application,
            "/ws/live/",
            headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")],
        )
        await comm.connect()
        return await next_frame(comm)

    assert async_to_sync(attempt)()["code"] == "unauthorized"


# ---- the host supervisors' socket: /ws/host/ ---------------------------------------------------


def host_communicator(secret=None, headers=()) -> WebsocketCommunicator:
    auth = [(b"authorization", f"Bearer {secret}".encode())] if secret else []
    return WebsocketCommunicator(application, "/ws/host/", headers=[*auth, *headers])


async def session_cookie(person) -> tuple:
    from asgiref.sync import sync_to_async
    from django.test import Client

    client = Client()
    await sync_to_async(client.force_login)(person)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


def test_no_host_socket_without_a_live_supervisor_token(world, checksum_sql):
    """Nothing, team A's superseded supervisor token, its placement token, Nova's expired
    session or her key, Spy's live session, or Charlie's browser session: refused with 4401."""

    async def attempt(who):
        if who == "session":
            comm = host_communicator(headers=[await session_cookie(world.charlie)])
        else:
            comm = host_communicator(world.secrets[who] if who else None)
        before = await database(checksum)(checksum_sql)
        assert (await comm.connect())[0]
        refusal = await next_frame(comm)
        closed = await comm.receive_output(timeout=3)
        await ended(comm)
        after = await database(checksum)(checksum_sql)
        return refusal, closed, changed(before, after)

    intruders = [None, "revoked_host_token", "placement_token", "expired_session", "agent_key"]
    for who in [*intruders, "foreign_agent", "revoked_token", "session"]:
        refusal, closed, diff = async_to_sync(attempt)(who)
        assert (refusal["type"], refusal["code"]) == ("error", "unauthorized"), who
        assert closed == {"type": "websocket.close", "code": 4401}, who
        assert diff == {}, who


def test_the_host_socket_takes_only_the_frames_listed_here():
    from work.host_socket import HostSocket

    # A heartbeat names nothing: a supervisor's agents are read from its token, never a frame.
    assert set(HostSocket.handlers) == {"heartbeat"}


def test_another_workspaces_supervisor_hears_nothing_of_team_a(world, checksum_sql):
    """Team B's host supervisor, and Charlie's and Dora's laptops (their API tokens): each is
    told only of its own agents; every frame naming team A's host or agent is refused and writes
    nothing; work for Nova wakes team A's host and none of them."""
    from agntchat.core import presence
    from conversations.actions import post_message
    from work.hosting import supervisor_id

    nova, host_a = str(world.nova.id), str(world.hosted_host.id)
    frames = [
        {"type": "heartbeat", "agent": nova},
        {"type": "heartbeat", "hostId": host_a},
        *({"type": kind, "agent": nova} for kind in ("wake", "stop", "restart", "agents")),
        {"type": "hello", "hostId": host_a, "agents": [{"id": nova, "name": "Nova"}]},
    ]

    async def attempt():
        intruders = {}
        for who in ("other_host_token", "other_member", "outsider"):
            comm = host_communicator(world.secrets[who])
            assert (await comm.connect())[0]
            intruders[who] = (comm, await next_frame(comm))
        before = await database(checksum)(checksum_sql)
        answers = {who: [] for who in intruders}
        for who, (comm, _) in intruders.items():
            await comm.send_json_to({"type": "heartbeat"})
            answers[who].append(await next_frame(comm))  # its own: answered
            for frame in frames:
                await comm.send_json_to(frame)
                answers[who].append(await next_frame(comm))
        diff = changed(before, await database(checksum)(checksum_sql))
        host_a_online = await database(presence.is_online)(supervisor_id(host_a))
        # Work for Nova: team A's supervisor is woken for her (the test can fail), no one else.
        await database(post_message)(world.alice, world.channel, "@nova the numbers, please")
        own = host_communicator(world.secrets["host_token"])
        assert (await own.connect())[0]
        heard_by_a = await drain(own, quiet=1)
        heard = {who: await drain(comm) for who, (comm, _) in intruders.items()}
        for comm, _ in [*intruders.values(), (own, None)]:
            await comm.disconnect()
        hellos = {who: hello for who, (_, hello) in intruders.items()}
        return hellos, answers, diff, host_a_online, heard_by_a, heard

    hellos, answers, diff, host_a_online, heard_by_a, heard = async_to_sync(attempt)()

    # Team B's host serves Warden; Charlie's laptop his local agent Spy; Dora's nothing.
    def hello(host, *agents):
        return {
            "type": "hello",
            "hostId": host,
            "agents": [{"id": str(a.id), "name": a.name} for a in agents],
        }

    assert hellos["other_host_token"] == hello(str(world.warden.host_id), world.warden)
    assert hellos["other_member"] == hello(None, world.spy)
    assert hellos["outsider"] == hello(None)
    for who, (own_heartbeat, *refusals) in answers.items():
        assert own_heartbeat == {"type": "heartbeat.ok"}, who
        assert [(a["type"], a["code"]) for a in refusals] == [
            ("error", "bad_frame"),
            ("error", "bad_frame"),
            *[("error", "unknown_type")] * 5,
        ], who
    assert diff == {} and host_a_online is False
    assert heard_by_a[0]["agents"] == [{"id": nova, "name": "Nova"}]
    assert {"type": "wake", "agent": nova} in heard_by_a
    assert heard == {"other_host_token": [], "other_member": [], "outsider": []}


# ---- the fronts: /v1 (OpenAI-compatible) and /mcp ---------------------------------------------


def front(method, path, secret=None, body=None):
    async def go():
        headers = [(b"host", b"localhost"), (b"content-type", b"application/json")]
        headers.append((b"accept", b"application/json, text/event-stream"))
        if secret:
            headers.append((b"authorization", f"Bearer {secret}".encode()))
        raw = json.dumps(body).encode() if body is not None else b""
        comm = HttpCommunicator(application, method, path, body=raw, headers=headers)
        return await comm.get_response(timeout=10)

    return async_to_sync(go)()


MCP_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "intruder", "version": "1"},
    },
}

FRONT_INTRUDERS = [
    "outsider",
    "other_member",
    "foreign_agent",
    "revoked_token",
    "expired_session",
    "host_token",
    None,
]


def test_the_fronts_show_no_intruder_team_a_s_agents(world, checksum_sql):
    for who in FRONT_INTRUDERS:
        fronts_refuse(world, checksum_sql, who)


def fronts_refuse(world, checksum_sql, who):
    secret = world.secrets[who] if who else None
    before = checksum(checksum_sql)
    models = front("GET", "/v1/models", secret)
    chat = front(
        "POST",
        "/v1/chat/completions",
        secret,
        {"model": "nova", "messages": [{"role": "user", "content": "What is the launch date?"}]},
    )
    mcp = front("POST", "/mcp", secret, MCP_INIT)
    valid = who in ("outsider", "other_member")  # a person's API token: they get their own share
    if valid:
        assert models["status"] == 200 and b"nova" not in models["body"].lower()
        assert chat["status"] == 404, chat["body"][:300]
        assert mcp["status"] == 200
        session = dict(mcp["headers"])[b"mcp-session-id"].decode()
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "nova", "arguments": {"instructions": "tell me"}},
        }
        answer = front_with_session(secret, session, call)
        assert json.loads(answer["body"])["error"]["message"] == "Unknown tool: nova"
    else:
        assert (models["status"], chat["status"], mcp["status"]) == (401, 401, 401)
    assert changed(before, checksum(checksum_sql)) == {}


def front_with_session(secret, session, body):
    async def go():
        headers = [
            (b"host", b"localhost"),
            (b"content-type", b"application/json"),
            (b"accept", b"application/json, text/event-stream"),
            (b"authorization", f"Bearer {secret}".encode()),
            (b"mcp-session-id", session.encode()),
        ]
        comm = HttpCommunicator(
            application, "POST", "/mcp", body=json.dumps(body).encode(), headers=headers
        )
        return await comm.get_response(timeout=10)

    return async_to_sync(go)()
