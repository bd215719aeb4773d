"""The platform tools (TOOL-1), each driven through the real call path (tests/work/tooling.py):
what a call changes is what a person's click changes, a malformed input is refused and changes
nothing, and another workspace's rows are not found."""

import gzip
import json
import socket
import threading
import time
import tracemalloc
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agents import actions as agent_actions
from agents.models import Agent, PersonalityRevision
from artifacts import actions as artifact_actions
from artifacts.card_library import SEED_TEMPLATES
from artifacts.models import Artifact, ArtifactVersion
from conversations.actions import create_conversation, open_direct, post_message
from conversations.models import Conversation, Message, Task
from conversations.tasks import create_task
from tests.integrations.test_probe_connections_sources import TricklingApi
from tests.work.tooling import claimed, held_message, held_task
from work import actions as work_actions
from work.models import ToolCall
from work.tools import platform_web
from work.tools.registry import REGISTRY, granted_tools

pytestmark = pytest.mark.django_db

PLATFORM_TOOLS = [
    "artifact_publish", "artifact_update", "card_post", "conversation_history", "done",
    "file_read", "memory_forget", "memory_recall", "memory_remember",
    "personality_read", "personality_write", "reminder_cancel", "reminder_list",
    "reminder_set", "skill_load", "task_cancel", "task_create", "task_list",
    "thread_resolve", "web_fetch", "workspace_search",
]  # fmt: skip


@pytest.fixture
def elsewhere(charlie, team_b):
    """Charlie's agent Orion and a channel of team B, with an artifact and a task there."""
    orion = agent_actions.create_agent(charlie, name="Orion", handle="orion", backend="scripted")
    room = create_conversation(
        charlie, team_b, kind="channel", title="b-room", agent_ids=[orion.id]
    )
    artifact = artifact_actions.publish_artifact(
        orion, room, "Budget of team B", "markdown", "The budget is secret."
    )
    task = create_task(charlie, team_b, orion, "Budget review of team B", conversation=room)
    return orion, room, artifact, task


def test_every_agent_has_the_platform_tools_in_name_order(nova):
    assert [t.name for t in granted_tools(nova)] == PLATFORM_TOOLS
    for name in PLATFORM_TOOLS:
        schema = REGISTRY[name].input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False, name


def test_malformed_inputs_are_refused_by_the_schema_and_change_nothing(alice, channel, nova):
    held = held_message(nova, channel, alice)
    before = Message.objects.count()
    for name, arguments in [
        ("thread_resolve", {}),
        ("artifact_publish", {"title": "Plan", "kind": "pdf", "content": "x"}),
        ("artifact_publish", {"title": "x" * 201, "kind": "markdown", "content": "x"}),
        ("artifact_update", {"artifact_id": "x"}),
        ("card_post", {"template": "no_such_template", "items": [{"title": "A"}]}),
        ("card_post", {"template": "hotels", "items": []}),
        ("card_post", {"template": "hotels", "items": [{"title": "A", "colour": "red"}]}),
        ("personality_write", {"text": "x" * (agent_actions.PERSONALITY_MAX + 1)}),
        ("task_create", {"agent": "nova"}),
        ("task_create", {"agent": "nova", "instructions": "x", "extra": 1}),
        ("task_list", {"status": "sleeping"}),
        ("task_cancel", {}),
        ("conversation_history", {"limit": 51}),
        ("workspace_search", {"query": "x", "limit": 21}),
        ("workspace_search", {"query": ""}),
        ("web_fetch", {"url": "file:///etc/passwd"}),
    ]:
        error = held.error(name, arguments)
        assert error["code"] == "tool_input_invalid", (name, arguments, error)
    assert Message.objects.count() == before
    assert not Artifact.objects.exists() and not Task.objects.exists()
    assert not PersonalityRevision.objects.exists()


# thread_resolve


def test_thread_resolve_resolves_the_side_thread_the_call_is_made_in(alice, bob, team_a, api):
    nova = agent_actions.create_agent(alice, name="Nova", backend="scripted")
    rex = agent_actions.create_agent(bob, name="Rex", handle="rex", backend="scripted")
    room = create_conversation(
        alice, team_a, kind="channel", title="room", agent_ids=[nova.id, rex.id]
    )
    post_message(nova, room, 'Mine.\n<dm target="Rex">Check the costs?</dm>')
    thread = Conversation.objects.get(kind="thread")
    held = claimed(rex, "message")  # Nova's message in the thread, delivered to Rex
    assert held.output("thread_resolve", {"summary": "Costs are 40k."})["status"] == "resolved"
    thread.refresh_from_db()
    assert (thread.thread_status, thread.summary) == ("resolved", "Costs are 40k.")
    # Again: the thread is closed, and the model is told so.
    assert held.error("thread_resolve", {"summary": "Again"})["code"] == "thread_closed"


def test_thread_resolve_outside_a_thread_is_refused_clearly(alice, channel, nova):
    held = held_message(nova, channel, alice)
    error = held.error("thread_resolve", {"summary": "Done."})
    assert error["code"] == "not_a_thread" and "not in a side thread" in error["message"]
    channel.refresh_from_db()
    assert channel.summary == ""


# artifacts and cards


def test_artifact_publish_creates_the_artifact_and_its_message(alice, channel, nova, api):
    held = held_message(nova, channel, alice)
    out = held.output(
        "artifact_publish",
        {"title": "Plan", "kind": "code", "content": "print(1)\n", "language": "python"},
    )
    assert out["version"] == 1 and out["ref"]["title"] == "Plan"
    artifact = Artifact.objects.get(pk=out["artifact_id"])
    assert (artifact.created_by_agent, artifact.conversation, artifact.language) == (
        nova,
        channel,
        "python",
    )
    shown = api(alice).get(f"/api/v1/artifacts/{artifact.id}/").json()
    assert (shown["title"], shown["currentVersion"]) == ("Plan", 1)
    assert Message.objects.get(pk=out["message_id"]).payload["artifact_id"] == str(artifact.id)


def test_artifact_tools_need_a_conversation(alice, team_a, nova):
    held = held_task(nova, team_a, alice)
    error = held.error("artifact_publish", {"title": "Plan", "kind": "markdown", "content": "x"})
    assert error["code"] == "no_conversation"
    assert not Artifact.objects.exists()


def test_artifact_update_adds_a_version(alice, channel, nova, api):
    artifact = artifact_actions.publish_artifact(alice, channel, "Notes", "markdown", "One.")
    held = held_message(nova, channel, alice)
    out = held.output(
        "artifact_update", {"artifact_id": str(artifact.id), "content": "Two.", "note": "more"}
    )
    assert out["version"] == 2
    versions = api(alice).get(f"/api/v1/artifacts/{artifact.id}/versions/").json()["results"]
    assert [(v["number"], v["note"]) for v in versions] == [(1, ""), (2, "more")]
    # The action's own refusal reaches the model: blank content.
    error = held.error("artifact_update", {"artifact_id": str(artifact.id), "content": "   "})
    assert "needs content" in error["message"]
    assert ArtifactVersion.objects.filter(artifact=artifact).count() == 2


def test_another_workspaces_artifact_is_not_found(alice, channel, nova, elsewhere):
    _, _, artifact, _ = elsewhere
    held = held_message(nova, channel, alice)
    for artifact_id in (str(artifact.id), "not-an-id"):
        error = held.error("artifact_update", {"artifact_id": artifact_id, "content": "Mine now."})
        assert error["code"] == "artifact_not_found"
    assert ArtifactVersion.objects.filter(artifact=artifact).count() == 1


def test_an_artifact_of_another_workspace_of_the_agent_is_not_found(alice, channel, nova):
    """Nova is in Alice's personal workspace too; from team A's work its artifacts there are
    out of reach (that workspace's own rules were not the ones checked)."""
    from workspaces.models import Workspace

    personal = Workspace.objects.get(owner=alice, kind=Workspace.Kind.PERSONAL)
    mine = create_conversation(alice, personal, kind="channel", title="mine", agent_ids=[nova.id])
    artifact = artifact_actions.publish_artifact(nova, mine, "Plan", "markdown", "One.")
    error = held_message(nova, channel, alice).error(
        "artifact_update", {"artifact_id": str(artifact.id), "content": "Two."}
    )
    assert error["code"] == "artifact_not_found"
    assert ArtifactVersion.objects.filter(artifact=artifact).count() == 1


def test_card_post_offers_the_curated_templates_and_posts_a_card(alice, channel, nova, api):
    card_tool = REGISTRY["card_post"]
    names = [t["name"] for t in SEED_TEMPLATES]
    assert card_tool.input_schema["properties"]["template"]["enum"] == names
    for template in SEED_TEMPLATES:
        assert f"- {template['name']}: {template['description']}" in card_tool.description
    assert "- hotels: " in card_tool.description and "price, rating" in card_tool.description

    held = held_message(nova, channel, alice)
    item = {
        "title": "Memmo Alfama",
        "price": {"amount": 229, "currency": "EUR", "period": "night"},
        "rating": 4.7,
        "actions": [{"id": "book", "label": "Book", "style": "primary"}],
    }
    out = held.output(
        "card_post",
        {"template": "hotels", "title": "Hotels in Lisbon", "items": [item], "body": "Found two."},
    )
    message = Message.objects.get(pk=out["message_id"])
    assert (message.author_agent, message.conversation, message.body) == (
        nova,
        channel,
        "Found two.",
    )
    card = api(alice).get(f"/api/v1/messages/{message.id}/card/").json()
    assert "Memmo Alfama" in card["html"]
    assert message.payload["card"]["template"] == "hotels"
    assert message.payload["card"]["items"][0]["price"]["amount"] == 229


def test_a_card_the_library_refuses_is_refused_with_its_field(alice, channel, nova):
    held = held_message(nova, channel, alice)
    before = Message.objects.count()
    # Fits the schema, but two buttons with one id: the card's own validation says which.
    actions = [{"id": "book", "label": "Book"}, {"id": "book", "label": "Again"}]
    error = held.error(
        "card_post", {"template": "hotels", "items": [{"title": "A", "actions": actions}]}
    )
    assert error["code"] == "card_invalid" and "duplicate action id" in error["message"]
    assert Message.objects.count() == before


# personality


def test_personality_read_and_write(alice, channel, nova):
    held = held_message(nova, channel, alice)
    assert held.output("personality_read")["personality"] == ""
    written = held.output("personality_write", {"text": "I am Nova; I research carefully."})
    assert written["length"] == len("I am Nova; I research carefully.")
    assert Agent.objects.get(pk=nova.pk).personality == "I am Nova; I research carefully."
    revision = PersonalityRevision.objects.get()
    assert revision.author_agent == nova
    assert held.output("personality_read")["personality"] == "I am Nova; I research carefully."


def test_personality_write_keeps_the_shrink_guard(alice, channel, nova):
    long = "A careful researcher who cites sources. " * 20
    agent_actions.set_personality(nova, long, author=alice)
    held = held_message(nova, channel, alice)
    error = held.error("personality_write", {"text": "Short."})
    assert error["code"] == "personality_shrink"
    assert "shrink the personality" in error["message"] and "owner can force" in error["message"]
    assert Agent.objects.get(pk=nova.pk).personality == long
    assert PersonalityRevision.objects.count() == 1


# tasks


@pytest.fixture
def orbit(alice):
    return agent_actions.create_agent(alice, name="Orbit", handle="orbit", backend="scripted")


def test_task_create_for_another_agent_or_itself(alice, channel, nova, orbit, api):
    held = held_message(nova, channel, alice)
    out = held.output("task_create", {"agent": "@orbit", "instructions": "Summarise the week."})
    task = Task.objects.get(pk=out["id"])
    assert (task.agent, task.created_by_agent, task.conversation) == (orbit, nova, channel)
    assert out["status"] == "queued" and out["agent"] == "orbit"
    mine = held.output("task_create", {"agent": nova.handle, "instructions": "Check later."})
    assert Task.objects.get(pk=mine["id"]).agent == nova
    shown = api(alice).get(f"/api/v1/tasks/{task.id}/")
    assert shown.status_code == 200 and shown.json()["instructions"] == "Summarise the week."


def test_task_create_without_an_agent_picks_one_with_the_tools_it_needs(
    alice, channel, nova, orbit
):
    work_actions.set_tool_grant(alice, nova, REGISTRY["web_fetch"], False)
    held = held_message(nova, channel, alice)
    out = held.output("task_create", {"instructions": "Read the page.", "tools": ["web_fetch"]})
    task = Task.objects.get(pk=out["id"])
    assert task.agent == orbit and task.tools == ["web_fetch"]
    # Nova, older, wins when no tool is named.
    plain = held.output("task_create", {"instructions": "Anything."})
    assert Task.objects.get(pk=plain["id"]).agent == nova


def test_task_create_for_an_agent_not_in_the_workspace_is_not_found(
    alice, channel, nova, elsewhere
):
    held = held_message(nova, channel, alice)
    before = Task.objects.count()
    for handle in ("orion", "nobody"):
        error = held.error("task_create", {"agent": handle, "instructions": "Do it."})
        assert error["code"] == "agent_not_found" and f"@{handle}" in error["message"]
    assert Task.objects.count() == before


def test_task_list_shows_the_tasks_the_agent_runs_or_created(
    alice, team_a, channel, nova, orbit, elsewhere
):
    held = held_message(nova, channel, alice)
    created = held.output("task_create", {"agent": "orbit", "instructions": "Created by Nova."})
    create_task(alice, team_a, nova, "Run by Nova.")
    create_task(alice, team_a, orbit, "Not Nova's at all.")
    listed = held.output("task_list")["tasks"]
    assert [t["instructions"] for t in listed] == ["Run by Nova.", "Created by Nova."]
    Task.objects.filter(pk=created["id"]).update(status="completed")
    queued = held.output("task_list", {"status": "queued"})["tasks"]
    assert [t["instructions"] for t in queued] == ["Run by Nova."]


def test_task_cancel_cancels_a_task_of_its_own(alice, channel, nova, orbit, elsewhere):
    held = held_message(nova, channel, alice)
    created = held.output("task_create", {"agent": "orbit", "instructions": "Never mind."})
    out = held.output("task_cancel", {"task_id": created["id"]})
    assert out["status"] == "cancelled"
    assert Task.objects.get(pk=created["id"]).status == "cancelled"
    assert held.error("task_cancel", {"task_id": created["id"]})["code"] == "task_finished"


def test_task_cancel_of_a_task_not_its_own_is_not_found(
    alice, team_a, channel, nova, orbit, elsewhere
):
    _, _, _, outside = elsewhere
    others = create_task(alice, team_a, orbit, "Orbit's own.")
    held = held_message(nova, channel, alice)
    for task in (outside, others):
        assert held.error("task_cancel", {"task_id": str(task.id)})["code"] == "task_not_found"
        task.refresh_from_db()
        assert task.status == "queued" and task.cancel_state == ""


# conversation_history


def test_conversation_history_reads_beyond_the_window(alice, bob, channel, nova):
    for i in range(30):
        post_message(bob if i % 2 else alice, channel, f"message {i}")
    held = held_message(nova, channel, alice, "message 30")
    older = held.output("conversation_history")
    # The newest 20 (10…30 less the one being answered) are the window; these come before.
    texts = [m["text"] for m in older["messages"]]
    assert texts == [f"message {i}" for i in range(11)]
    assert older["messages"][1]["author"] == "bob" and older["more"] is False
    first_page = held.output("conversation_history", {"offset": 0, "limit": 5})
    assert [m["text"] for m in first_page["messages"]] == [f"message {i}" for i in range(26, 31)]
    before = held.output(
        "conversation_history", {"before": first_page["messages"][0]["id"], "limit": 3}
    )
    assert [m["text"] for m in before["messages"]] == ["message 23", "message 24", "message 25"]
    assert before["more"] is True


def test_conversation_history_refuses_a_message_of_another_conversation(
    alice, channel, nova, elsewhere
):
    _, room, artifact, _ = elsewhere
    held = held_message(nova, channel, alice)
    outside = artifact.message_id
    error = held.error("conversation_history", {"before": str(outside)})
    assert error["code"] == "message_not_found"


# workspace_search


def test_workspace_search_ranks_better_matches_first_and_only_what_the_agent_sees(
    alice, bob, team_a, channel, nova, orbit, elsewhere
):
    post_message(alice, channel, "The budget came up once, among other things we talked about.")
    post_message(bob, channel, "Budget, budget: the budget review decides the marketing budget.")
    artifact_actions.publish_artifact(alice, channel, "Budget plan", "markdown", "Budget lines.")
    create_task(alice, team_a, nova, "Prepare the budget numbers.")
    # Not Nova's to see: a direct conversation of Alice and Bob, another agent's task, team B.
    direct, _ = open_direct(alice, team_a, user_ids=[bob.id])
    post_message(alice, direct, "Our private budget talk.")
    create_task(alice, team_a, orbit, "Orbit's budget task.")
    held = held_message(nova, channel, alice)

    results = held.output("workspace_search", {"query": "budget"})["results"]
    texts = " ".join(r["text"] for r in results)
    assert "private" not in texts and "Orbit" not in texts and "secret" not in texts
    assert "team B" not in texts
    messages = [r["text"] for r in results if r["kind"] == "message"]
    assert "review" in messages[0]
    assert any("once" in text for text in messages[1:])
    assert {r["kind"] for r in results} == {"message", "artifact", "task"}
    assert all(a["rank"] >= b["rank"] for a, b in zip(results, results[1:], strict=False))
    artifact = next(r for r in results if r["kind"] == "artifact")
    assert artifact["title"] == "Budget plan" and "**Budget**" in artifact["text"]

    only_tasks = held.output("workspace_search", {"query": "budget", "kinds": ["task"]})
    assert [r["text"] for r in only_tasks["results"]] == ["Prepare the **budget** numbers."]
    phrase = held.output("workspace_search", {"query": '"marketing budget"', "limit": 1})
    assert len(phrase["results"]) == 1 and "review" in phrase["results"][0]["text"]
    assert held.output("workspace_search", {"query": "nothingmatchesthis"})["results"] == []


# web_fetch


PAGE = """<!doctype html><html><head><title>The  Test Page</title>
<style>body { color: red }</style><script>alert("no")</script></head>
<body><nav>Home</nav><h1>Hello</h1><p>First &amp; foremost.</p>
<script>var hidden = 1;</script><p>Second line.</p></body></html>"""


@cache
def bomb() -> bytes:
    """128 MB of text as 128 KB of gzip: what a hostile site sends to blow up a reader."""
    return gzip.compress(b"a" * (128 * 1024 * 1024), compresslevel=1)


class Site(BaseHTTPRequestHandler):
    """A local web site: pages, redirects, a big page, a picture, compressed pages and a slow
    redirect."""

    def do_GET(self):
        port = self.server.server_address[1]
        if self.path == "/slow":  # half a second per hop, redirecting to itself
            time.sleep(0.5)
            self.send_response(302)
            self.send_header("Location", "/slow")
            self.end_headers()
            return
        encoded = {
            "/zipped": ("gzip", gzip.compress(PAGE.encode())),
            "/bomb": ("gzip", bomb()),
            "/twice": ("gzip, gzip", gzip.compress(gzip.compress(PAGE.encode()))),
        }
        if self.path in encoded:
            encoding, body = encoded[self.path]
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Encoding", encoding)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        routes = {
            "/page": (200, "text/html; charset=utf-8", PAGE.encode()),
            "/big": (200, "text/plain", b"word " * (600 * 1024)),
            "/picture": (200, "image/png", b"\x89PNG\r\n"),
            "/latin": (200, "text/plain; charset=latin-1", "café".encode("latin-1")),
            "/no-such-charset": (200, "text/plain; charset=nonsense", "café".encode()),
            "/not-a-text-codec": (200, "text/plain; charset=idna", "café".encode()),
        }
        redirects = {
            "/hop": "/page",
            "/loop": "/loop",
            "/to-private": f"http://127.0.0.2:{port}/page",
            "/to-file": "file:///etc/passwd",
        }
        if self.path in redirects:
            self.send_response(302)
            self.send_header("Location", redirects[self.path])
            self.end_headers()
            return
        if self.path == "/host":  # the Host header it was sent
            routes[self.path] = (200, "text/plain", self.headers["Host"].encode())
        status, kind, body = routes.get(self.path, (404, "text/plain", b"no such page"))
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def site():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Site)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def fetching(alice, channel, nova):
    """Nova holding a message, with web_fetch allowed by its owner (external: it asks first)."""
    work_actions.set_agent_permission(alice, nova, REGISTRY["web_fetch"], "allow")
    return held_message(nova, channel, alice)


def test_web_fetch_asks_first_by_default(alice, channel, nova, site):
    held = held_message(nova, channel, alice)
    answer = held.call("web_fetch", {"url": site + "/page"})
    assert answer.pending is not None
    assert ToolCall.objects.get(tool="web_fetch").status == "waiting"


def test_web_fetch_reads_a_page_as_clean_text(fetching, site, settings):
    settings.WEB_FETCH_ALLOW_PRIVATE = True
    page = fetching.output("web_fetch", {"url": site + "/hop"})
    assert list(page)[:2] == ["url", "status"] and page["url"] == site + "/page"
    assert page["title"] == "The Test Page" and page["truncated"] is False
    assert page["text"] == "Home\n\nHello\n\nFirst & foremost.\n\nSecond line."
    assert "alert" not in json.dumps(page) and "color" not in json.dumps(page)
    missing = fetching.output("web_fetch", {"url": site + "/nothing"})
    assert (missing["status"], missing["text"]) == (404, "no such page")


def test_web_fetch_cuts_a_long_page_and_says_so(fetching, site, settings):
    settings.WEB_FETCH_ALLOW_PRIVATE = True
    page = fetching.output("web_fetch", {"url": site + "/big"})
    assert len(page["text"]) == platform_web.MAX_CHARS and page["truncated"] is True
    assert "cut off" in page["note"]


def test_web_fetch_refuses_private_addresses_by_default(fetching, site):
    for url in (
        site + "/page",
        "http://localhost:9/",
        "http://[::1]:9/",
        "http://169.254.169.254/",
    ):
        error = fetching.error("web_fetch", {"url": url})
        assert error["code"] == "web_fetch_refused" and "private" in error["message"], url


def test_ipv6_forms_that_carry_a_private_ipv4_address_are_refused():
    refused = platform_web.refused_address
    for address in (
        "::ffff:127.0.0.1",  # mapped
        "2002:7f00:1::",  # 6to4 around 127.0.0.1
        "2002:a9fe:a9fe::1",  # 6to4 around 169.254.169.254
        "2002:c0a8:101::",  # 6to4 around 192.168.1.1
        "fec0::1",  # site-local (deprecated, still routed by some)
    ):
        assert refused(address), address
    for address in ("2002:808:808::", "2606:4700:4700::1111", "8.8.8.8"):  # public: fetched
        assert not refused(address), address


def test_web_fetch_checks_every_redirect(fetching, site, settings, monkeypatch):
    # 127.0.0.1 stands in for a public web server here; every other address is judged as ever.
    judged = platform_web.refused_address
    monkeypatch.setattr(platform_web, "refused_address", lambda a: a != "127.0.0.1" and judged(a))
    assert fetching.output("web_fetch", {"url": site + "/hop"})["title"] == "The Test Page"
    error = fetching.error("web_fetch", {"url": site + "/to-private"})
    assert error["code"] == "web_fetch_refused" and "127.0.0.2" in error["message"]
    error = fetching.error("web_fetch", {"url": site + "/to-file"})
    assert error["code"] == "web_fetch_refused" and "Only http and https" in error["message"]
    error = fetching.error("web_fetch", {"url": site + "/loop"})
    assert "more than 5 times" in error["message"]
    error = fetching.error("web_fetch", {"url": site + "/picture"})
    assert "not text" in error["message"] and "image/png" in error["message"]


def test_web_fetch_inflates_a_compressed_page_no_further_than_it_keeps(fetching, site, settings):
    settings.WEB_FETCH_ALLOW_PRIVATE = True
    assert fetching.output("web_fetch", {"url": site + "/zipped"})["title"] == "The Test Page"
    tracemalloc.start()
    try:
        page = fetching.output("web_fetch", {"url": site + "/bomb"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert page["truncated"] is True and set(page["text"]) == {"a"}
    # 128 MB inflated whole would be; what is kept is at most MAX_BYTES.
    assert peak < 8 * platform_web.MAX_BYTES, peak
    # Layer on layer (each a thousandfold) is not read at all.
    error = fetching.error("web_fetch", {"url": site + "/twice"})
    assert error["code"] == "web_fetch_refused" and "gzip, gzip" in error["message"]


def test_web_fetch_stops_at_its_time_limit_across_redirects(fetching, site, settings, monkeypatch):
    settings.WEB_FETCH_ALLOW_PRIVATE = True
    monkeypatch.setattr(platform_web, "FETCH_SECONDS", 1.2)
    started = time.monotonic()
    error = fetching.error("web_fetch", {"url": site + "/slow"})  # 6 hops: 3 seconds
    assert time.monotonic() - started < 2.0
    assert error["code"] == "web_fetch_failed" and "1.2 seconds" in error["message"]


def test_markup_left_open_is_read_in_linear_time():
    # Python's HTMLParser alone rescans to the end of the page at each "<" it cannot close:
    # 80 KB of "<a" took seconds, the 2 MB a page may be most of an hour of a server's CPU.
    page = platform_web.TextOfPage()
    started = time.monotonic()
    page.feed("<title>T</title><p>x < y<!-- note --> &amp; z</p><!DOCTYPE html><p>" + "<a" * 40_000)
    page.close()
    assert time.monotonic() - started < 0.5
    assert page.title == "T" and page.text == "x < y & z\n\n" + "<a" * 40_000


def test_web_fetch_reads_a_page_whatever_charset_it_names(fetching, site, settings):
    settings.WEB_FETCH_ALLOW_PRIVATE = True
    assert fetching.output("web_fetch", {"url": site + "/latin"})["text"] == "café"
    # A charset Python does not know, or cannot decode leniently with: read as UTF-8.
    for path in ("/no-such-charset", "/not-a-text-codec"):
        assert fetching.output("web_fetch", {"url": site + path})["text"] == "café", path


def test_web_fetch_reads_a_page_of_an_internationalised_name(fetching, site, settings, monkeypatch):
    # The DNS here: bücher.example (by its ASCII form, as getaddrinfo asks) is the local site.
    settings.WEB_FETCH_ALLOW_PRIVATE = True
    port = site.rsplit(":", 1)[1]
    known, real = {"xn--bcher-kva.example": "127.0.0.1"}, socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        name = host.encode("idna").decode()
        return real(known.get(name, name), *args, **kwargs)

    monkeypatch.setattr(platform_web.socket, "getaddrinfo", getaddrinfo)
    page = fetching.output("web_fetch", {"url": f"http://bücher.example:{port}/host"})
    assert page["text"] == f"xn--bcher-kva.example:{port}"


def test_web_fetch_cuts_a_server_trickling_its_headers_at_its_time_limit(
    fetching, settings, monkeypatch
):
    # httpx's timeouts are per read: one byte every 0.1 s never trips them.
    settings.WEB_FETCH_ALLOW_PRIVATE = True
    monkeypatch.setattr(platform_web, "FETCH_SECONDS", 1.0)
    server = TricklingApi(seconds=8)
    try:
        started = time.monotonic()
        error = fetching.error("web_fetch", {"url": server.url})
    finally:
        server.stop()
    assert time.monotonic() - started < 3.0
    assert error["code"] == "web_fetch_failed" and "took longer than" in error["message"]
