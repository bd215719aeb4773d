"""Artifacts as a story: Alice publishes, Bob revises and comments, Nova works through the socket
frames, Charlie (another workspace) sees nothing."""

from html.parser import HTMLParser
from importlib import import_module

import pytest
from django.apps import apps as django_apps

from agntchat.core.exceptions import AppError
from agntchat.core.validation import MAX_JSON_DEPTH
from artifacts import actions, frames, rendering
from artifacts.models import Artifact, ArtifactComment, ArtifactVersion
from conversations import actions as conversation_actions
from conversations.models import Message
from tests.conftest import agent_session
from tests.socket_helpers import TopicInbox

pytestmark = pytest.mark.django_db

PLAN_V1 = "# Launch plan\n\n- write the brief\n- book the venue\n"
PLAN_V2 = "# Launch plan\n\n- write the brief\n- book the hall\n- invite press\n"


def publish(client, conversation, **overrides):
    body = {"title": "Launch plan", "kind": "markdown", "content": PLAN_V1, **overrides}
    return client.post(f"/api/v1/conversations/{conversation.id}/artifacts/", body, format="json")


def counts():
    return (
        Artifact.objects.count(),
        ArtifactVersion.objects.count(),
        ArtifactComment.objects.count(),
        Message.objects.count(),
    )


def person(user):
    return {"type": "person", "id": str(user.id), "name": user.username, "username": user.username}


def test_it_publishes_an_artifact_with_a_compact_message(alice, channel, api):
    response = publish(api(alice), channel)
    assert response.status_code == 201, response.json()
    artifact = response.json()
    assert artifact["title"] == "Launch plan"
    assert artifact["kind"] == "markdown"
    assert artifact["currentVersion"] == 1
    assert artifact["createdBy"] == person(alice)
    assert artifact["version"]["number"] == 1
    assert artifact["version"]["content"] == PLAN_V1
    assert artifact["version"]["html"].startswith("<h1>Launch plan</h1>")
    assert artifact["version"]["srcdoc"] is None
    message = Message.objects.get(pk=artifact["messageId"])
    assert message.body == "📄 published “Launch plan”"
    # The message references the artifact; the content itself stays out of the chat.
    reference = {"id": artifact["id"], "title": "Launch plan", "kind": "markdown", "version": 1}
    assert message.payload == {"artifact_id": artifact["id"], "artifact": reference}
    history = api(alice).get(f"/api/v1/conversations/{channel.id}/messages/").json()["results"]
    assert history[-1]["artifact"] == reference
    assert "write the brief" not in str(history[-1])
    listed = api(alice).get(f"/api/v1/conversations/{channel.id}/artifacts/").json()["results"]
    assert [a["id"] for a in listed] == [artifact["id"]]


def test_it_keeps_every_version_with_who_when_and_why(alice, bob, channel, api):
    artifact_id = publish(api(alice), channel).json()["id"]
    edited = api(bob).post(
        f"/api/v1/artifacts/{artifact_id}/versions/",
        {"content": PLAN_V2, "note": "Bigger hall, press list"},
        format="json",
    )
    assert edited.status_code == 201, edited.json()
    assert edited.json()["number"] == 2
    history = api(alice).get(f"/api/v1/artifacts/{artifact_id}/versions/").json()["results"]
    assert [(v["number"], v["author"], v["note"]) for v in history] == [
        (1, person(alice), ""),
        (2, person(bob), "Bigger hall, press list"),
    ]
    assert history[0]["createdAt"] < history[1]["createdAt"]
    old = api(bob).get(f"/api/v1/artifacts/{artifact_id}/versions/1/").json()
    assert old["content"] == PLAN_V1
    detail = api(bob).get(f"/api/v1/artifacts/{artifact_id}/").json()
    assert detail["currentVersion"] == 2
    assert detail["version"]["content"] == PLAN_V2
    assert api(bob).get(f"/api/v1/artifacts/{artifact_id}/versions/3/").status_code == 404


def test_it_diffs_any_two_versions(alice, bob, channel, api):
    artifact_id = publish(api(alice), channel).json()["id"]
    api(bob).post(f"/api/v1/artifacts/{artifact_id}/versions/", {"content": PLAN_V2}, format="json")
    diff = api(alice).get(f"/api/v1/artifacts/{artifact_id}/diff/?from=1&to=2").json()
    assert (diff["from"], diff["to"], diff["added"], diff["removed"]) == (1, 2, 2, 1)
    assert "-- book the venue" in diff["unified"].splitlines()
    assert "+- book the hall" in diff["unified"].splitlines()
    assert '<tr class="diff-ins">' in diff["html"]
    assert diff["exact"] is True
    missing = api(alice).get(f"/api/v1/artifacts/{artifact_id}/diff/?from=1&to=7")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "version_not_found"
    bad = api(alice).get(f"/api/v1/artifacts/{artifact_id}/diff/?from=one&to=2")
    assert bad.status_code == 400 and set(bad.json()["error"]["fields"]) == {"from"}


def test_it_says_when_versions_are_too_large_to_diff_line_by_line(alice, channel, api):
    # Line by line, difflib would pair every line with every other here: hours of CPU.
    lines = "a\n" * 150_000
    artifact_id = publish(api(alice), channel, kind="code", content=lines).json()["id"]
    edited = api(alice).post(
        f"/api/v1/artifacts/{artifact_id}/versions/", {"content": "b\n" + lines}, format="json"
    )
    assert edited.status_code == 201
    diff = api(alice).get(f"/api/v1/artifacts/{artifact_id}/diff/?from=1&to=2").json()
    assert (diff["exact"], diff["added"], diff["removed"]) == (False, 1, 0)
    assert diff["unified"].splitlines()[:4] == ["--- v1", "+++ v2", "@@ -1,3 +1,4 @@", "+b"]
    assert rendering.TOO_LARGE_TO_COMPARE in diff["html"]


def test_it_threads_comments_and_ties_them_to_versions(alice, bob, channel, api):
    artifact_id = publish(api(alice), channel).json()["id"]
    api(alice).post(
        f"/api/v1/artifacts/{artifact_id}/versions/", {"content": PLAN_V2}, format="json"
    )
    first = api(bob).post(
        f"/api/v1/artifacts/{artifact_id}/comments/",
        {"body": "Is the venue booked?", "version": 1},
        format="json",
    )
    assert first.status_code == 201, first.json()
    reply = api(alice).post(
        f"/api/v1/artifacts/{artifact_id}/comments/",
        {"body": "Switched to the hall in v2.", "parent": first.json()["id"]},
        format="json",
    )
    assert reply.status_code == 201, reply.json()
    thread = api(bob).get(f"/api/v1/artifacts/{artifact_id}/comments/").json()["results"]
    assert [(c["body"], c["version"], c["parentId"], c["author"]["id"]) for c in thread] == [
        ("Is the venue booked?", 1, None, str(bob.id)),
        ("Switched to the hall in v2.", None, first.json()["id"], str(alice.id)),
    ]
    # A page at a time: a long discussion is read to its end, not cut at the first thousand.
    path = f"/api/v1/artifacts/{artifact_id}/comments/"
    pages = [api(bob).get(f"{path}?limit=1&page={n}").json() for n in (1, 2)]
    assert [([c["body"] for c in p["results"]], p["hasMore"]) for p in pages] == [
        (["Is the venue booked?"], True),
        (["Switched to the hall in v2."], False),
    ]
    assert api(bob).get(f"{path}?limit=0").status_code == 400


def test_it_refuses_a_comment_on_a_missing_version_or_a_foreign_parent(alice, channel, api):
    first = publish(api(alice), channel).json()["id"]
    second = publish(api(alice), channel, title="Budget").json()["id"]
    foreign = api(alice).post(
        f"/api/v1/artifacts/{second}/comments/", {"body": "on budget"}, format="json"
    )
    before = counts()
    # An id naming nothing of this artifact is a 404 naming the field; malformed input a 400.
    for body, field, status in [
        ({"body": "x", "parent": foreign.json()["id"]}, "parent", 404),
        ({"body": "x", "version": 9}, "version", 404),
        ({"body": "x", "version": "one"}, "version", 400),
        ({"body": "   "}, "body", 400),
        ({"body": "x", "mood": "happy"}, "mood", 400),
    ]:
        response = api(alice).post(f"/api/v1/artifacts/{first}/comments/", body, format="json")
        assert response.status_code == status, body
        assert set(response.json()["error"]["fields"]) == {field}
    assert counts() == before


def test_it_rejects_bad_artifacts_and_writes_nothing(alice, channel, api):
    before = counts()
    too_big = "x" * (actions.MAX_CONTENT_BYTES + 1)
    # Multi-byte text: the limit is on stored bytes, not on characters.
    too_big_in_bytes = "é" * (actions.MAX_CONTENT_BYTES // 2 + 1)
    for overrides, field in [
        ({"kind": "pdf"}, "kind"),
        ({"title": "t" * 201}, "title"),
        ({"title": ""}, "title"),
        ({"content": ""}, "content"),
        ({"content": too_big}, "content"),
        ({"content": too_big_in_bytes}, "content"),
        ({"content": 42}, "content"),
        ({"language": "py<script>"}, "language"),
        ({"owner": "me"}, "owner"),
    ]:
        response = publish(api(alice), channel, **overrides)
        assert response.status_code == 400, overrides
        assert set(response.json()["error"]["fields"]) == {field}, overrides
    artifact_id = publish(api(alice), channel).json()["id"]
    before = counts()
    response = api(alice).post(
        f"/api/v1/artifacts/{artifact_id}/versions/", {"content": too_big}, format="json"
    )
    assert response.status_code == 400 and set(response.json()["error"]["fields"]) == {"content"}
    response = api(alice).post(
        f"/api/v1/artifacts/{artifact_id}/versions/",
        {"content": "ok", "note": "n" * 501},
        format="json",
    )
    assert response.status_code == 400 and set(response.json()["error"]["fields"]) == {"note"}
    assert counts() == before
    assert Artifact.objects.get(pk=artifact_id).current_version == 1


DEEP_JSON = [
    "[" * 10_000 + "]" * 10_000,
    '{"a": ' * 10_000 + "1" + "}" * 10_000,
    "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1),
]


def refused_everywhere(alice, channel, nova, api, artifact_id, content):
    """Offer CONTENT, of the kind of artifact ARTIFACT_ID, as a new artifact and as its next
    version (REST), and in Nova's artifact frame: each is refused as artifact_invalid and
    nothing is written. The error fields of the two REST answers, for the caller to check."""
    kind = Artifact.objects.get(pk=artifact_id).kind
    before = counts()
    published = publish(api(alice), channel, kind=kind, content=content)
    edited = api(alice).post(
        f"/api/v1/artifacts/{artifact_id}/versions/", {"content": content}, format="json"
    )
    for response in (published, edited):
        assert response.status_code == 400, response.content[:200]
        assert response.json()["error"]["code"] == "artifact_invalid"
    frame = {"conversationId": str(channel.id), "title": "T", "kind": kind, "content": content}
    with pytest.raises(AppError) as refused:
        frames.publish_artifact(nova, {"type": "artifact.publish", **frame})
    assert refused.value.code == "artifact_invalid"
    assert counts() == before
    assert Artifact.objects.get(pk=artifact_id).current_version == 1
    return [response.json()["error"]["fields"] for response in (published, edited)]


@pytest.mark.parametrize("content", DEEP_JSON)
def test_it_refuses_json_artifacts_nested_too_deeply_and_writes_nothing(
    alice, channel, nova, api, content
):
    artifact_id = publish(api(alice), channel, kind="json", content="[1]").json()["id"]
    fields = refused_everywhere(alice, channel, nova, api, artifact_id, content)
    assert fields == [{"content": "Nested too deeply."}] * 2


# A json artifact is shown parsed and pretty-printed, and exported as a .json file.
NOT_JSON = {
    "unpaired surrogate": '"\\ud800"',
    "unpaired surrogate as a key": '{"\\udfff": 1}',
    "half a pair": '["ok", "\\ud83d"]',
    "cut short": "[1, 2",
    "NaN": "[NaN]",
    "Infinity": "-Infinity",
    "a number beyond a float": "[1e400]",
    "plain text": "hello",
}


@pytest.mark.parametrize("content", NOT_JSON.values(), ids=NOT_JSON.keys())
def test_it_refuses_json_artifacts_that_are_not_json_and_writes_nothing(
    alice, channel, nova, api, content
):
    artifact_id = publish(api(alice), channel, kind="json", content="[1]").json()["id"]
    fields = refused_everywhere(alice, channel, nova, api, artifact_id, content)
    assert [set(each) for each in fields] == [{"content"}] * 2


def test_it_stores_json_with_escapes_and_large_whole_numbers(alice, channel, api):
    content = '{"smile": "\\ud83d\\ude00", "nul": "\\u0000", "id": 12345678901234567890}'
    published = publish(api(alice), channel, kind="json", content=content)
    assert published.status_code == 201, published.json()
    html = published.json()["version"]["html"]
    assert "😀" in html and "\\u0000" in html and "12345678901234567890" in html


def test_it_stores_json_artifacts_nested_up_to_the_limit(alice, channel, api):
    content = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    published = publish(api(alice), channel, kind="json", content=content)
    assert published.status_code == 201
    artifact_id = published.json()["id"]
    for path in ("", "versions/", "versions/1/"):
        assert api(alice).get(f"/api/v1/artifacts/{artifact_id}/{path}").status_code == 200


def test_a_publish_that_fails_while_answering_leaves_nothing_behind(
    alice, channel, api, monkeypatch
):
    def broken(artifact):
        raise RuntimeError("the answer could not be built")

    monkeypatch.setattr("artifacts.api.artifact_data", broken)
    client = api(alice)
    client.raise_request_exception = False
    before = counts()
    assert publish(client, channel).status_code == 500
    assert counts() == before


DEEP_HTML = {
    "nested divs": "<div>" * 30_000 + "x" + "</div>" * 30_000,
    "formatting reopened in every paragraph": "".join(f"<p><b id={i}></p>x" for i in range(20_000)),
}


@pytest.fixture
def sanitised(monkeypatch):
    """The length of each page the sanitiser is handed (it is ours: wrapped, not replaced)."""
    pages = []
    real = rendering.sanitize_html

    def counted(html):
        pages.append(len(html))
        return real(html)

    monkeypatch.setattr(rendering, "sanitize_html", counted)
    return pages


@pytest.mark.parametrize("content", DEEP_HTML.values(), ids=DEEP_HTML.keys())
def test_it_refuses_html_pages_nested_too_deeply_before_sanitising(
    alice, channel, nova, api, sanitised, content
):
    artifact_id = publish(api(alice), channel, kind="html", content="<p>v1</p>").json()["id"]
    sanitised.clear()
    fields = refused_everywhere(alice, channel, nova, api, artifact_id, content)
    assert fields == [{"content": "Nested too deeply."}] * 2
    assert sanitised == []  # refused before the slow part ever ran


def test_reads_serve_the_page_sanitised_once_when_stored(
    alice, team_a, channel, api, client, sanitised
):
    page = "<h1>Plan</h1><p onclick='steal()'>safe <b>text</b></p><script>alert(1)</script>"
    created = publish(api(alice), channel, kind="html", content=page).json()
    assert sanitised == [len(page)]
    stored = ArtifactVersion.objects.get(artifact_id=created["id"])
    assert stored.rendered == created["version"]["srcdoc"] == "<h1>Plan</h1><p>safe <b>text</b></p>"
    client.force_login(alice)
    base = f"/api/v1/artifacts/{created['id']}"
    page_url = f"/w/{team_a.id}/artifacts/{created['id']}/"
    reads = [
        api(alice).get(f"{base}/"),
        api(alice).get(f"{base}/versions/"),
        api(alice).get(f"{base}/versions/1/"),
        client.get(page_url),
    ]
    assert [response.status_code for response in reads] == [200, 200, 200, 200]
    assert sanitised == [len(page)]  # no read sanitised anything
    # What reads serve is the stored rendering itself.
    ArtifactVersion.objects.filter(pk=stored.pk).update(rendered="<p>as stored</p>")
    assert api(alice).get(f"{base}/").json()["version"]["srcdoc"] == "<p>as stored</p>"
    assert api(alice).get(f"{base}/versions/1/").json()["srcdoc"] == "<p>as stored</p>"
    assert 'srcdoc="&lt;p&gt;as stored&lt;/p&gt;"' in client.get(page_url).content.decode()


def test_the_migration_renders_the_versions_already_stored(alice, channel):
    actions.publish_artifact(alice, channel, "Doc", "markdown", "# Title")
    actions.publish_artifact(alice, channel, "Page", "html", "<p>x<script>y()</script>")
    deep = actions.publish_artifact(alice, channel, "Deep", "json", "[1]")
    # As versions stood before the column: no rendering, and content stored before the limits.
    ArtifactVersion.objects.update(rendered="")
    ArtifactVersion.objects.filter(artifact=deep).update(content="[" * 5_000 + "]" * 5_000)
    migration = import_module("artifacts.migrations.0003_artifactversion_rendered")
    migration.render_stored_versions(django_apps, None)
    rendered = dict(ArtifactVersion.objects.values_list("artifact__title", "rendered"))
    assert rendered["Doc"] == "<h1>Title</h1>\n"
    assert rendered["Page"] == "<p>x</p>"
    assert rendered["Deep"].startswith("<pre><code>[[[")


def test_it_hides_artifacts_from_outsiders_on_every_endpoint(
    alice, bob, charlie, team_a, team_b, channel, nova, api, django_capture_on_commit_callbacks
):
    artifact_id = publish(api(alice), channel).json()["id"]
    api(alice).post(
        f"/api/v1/artifacts/{artifact_id}/versions/", {"content": PLAN_V2}, format="json"
    )
    api(bob).post(f"/api/v1/artifacts/{artifact_id}/comments/", {"body": "ok"}, format="json")
    before = counts()
    client = api(charlie)
    base = f"/api/v1/artifacts/{artifact_id}"
    with django_capture_on_commit_callbacks() as callbacks:
        responses = {
            "list": client.get(f"/api/v1/conversations/{channel.id}/artifacts/"),
            "publish": publish(client, channel),
            "detail": client.get(f"{base}/"),
            "versions": client.get(f"{base}/versions/"),
            "version": client.get(f"{base}/versions/1/"),
            "edit": client.post(f"{base}/versions/", {"content": "mine now"}, format="json"),
            "diff": client.get(f"{base}/diff/?from=1&to=2"),
            "comments": client.get(f"{base}/comments/"),
            "comment": client.post(f"{base}/comments/", {"body": "hi"}, format="json"),
        }
    assert {name: r.status_code for name, r in responses.items()} == dict.fromkeys(responses, 404)
    codes = {name: r.json()["error"]["code"] for name, r in responses.items()}
    assert codes.pop("list") == codes.pop("publish") == "conversation_not_found"
    assert set(codes.values()) == {"artifact_not_found"}
    assert counts() == before
    assert callbacks == []  # nothing announced either


def test_it_follows_the_conversation_membership_of_a_direct_conversation(alice, bob, team_a, api):
    dm = conversation_actions.create_conversation(alice, team_a, kind="direct", title="1:1")
    artifact_id = publish(api(alice), dm).json()["id"]
    # Bob is Alice's teammate, but not in this conversation: the artifact does not exist for him.
    assert api(bob).get(f"/api/v1/artifacts/{artifact_id}/").status_code == 404
    assert api(alice).get(f"/api/v1/artifacts/{artifact_id}/").status_code == 200


def test_an_agent_uses_the_artifact_endpoints_of_its_conversations(
    alice, team_a, channel, nova, client
):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {agent_session(nova)}"}
    published = client.post(
        f"/api/v1/conversations/{channel.id}/artifacts/",
        {"title": "Findings", "kind": "code", "content": "print('hi')\n", "language": "python"},
        content_type="application/json",
        **headers,
    )
    assert published.status_code == 201, published.json()
    assert published.json()["createdBy"]["type"] == "agent"
    assert (
        '<pre class="highlight"><code class="language-python">'
        in published.json()["version"]["html"]
    )
    artifact_id = published.json()["id"]
    edited = client.post(
        f"/api/v1/artifacts/{artifact_id}/versions/",
        {"content": "print('hello')\n", "note": "friendlier"},
        content_type="application/json",
        **headers,
    )
    assert edited.status_code == 201 and edited.json()["author"]["id"] == str(nova.id)
    dm = conversation_actions.create_conversation(alice, team_a, kind="direct", title="no agents")
    private = actions.publish_artifact(alice, dm, "Private", "markdown", "secret")
    assert client.get(f"/api/v1/artifacts/{private.id}/", **headers).status_code == 404
    assert (
        client.post(
            f"/api/v1/conversations/{dm.id}/artifacts/",
            {"title": "x", "kind": "markdown", "content": "x"},
            content_type="application/json",
            **headers,
        ).status_code
        == 404
    )


def test_it_takes_artifact_frames_from_agents(alice, channel, nova):
    frame = {
        "type": "artifact.publish",
        "conversationId": str(channel.id),
        "title": "Report",
        "kind": "json",
        "content": '{"b": 1}',
        "ref": "work:1",
    }
    published = frames.publish_artifact(nova, frame)
    artifact = Artifact.objects.get(pk=published["artifactId"])
    assert published == {
        "type": "artifact.published",
        "artifactId": str(artifact.id),
        "version": 1,
        "messageId": str(artifact.message_id),
        "ref": "work:1",
    }
    assert artifact.created_by_agent == nova
    # A retried frame (same ref) is the same artifact, not a second one.
    again = frames.publish_artifact(nova, frame)
    assert again == published and Artifact.objects.count() == 1
    updated = frames.update_artifact(
        nova,
        {
            "type": "artifact.update",
            "artifactId": str(artifact.id),
            "content": '{"b": 2}',
            "note": "fix",
        },
    )
    assert updated == {"type": "artifact.updated", "artifactId": str(artifact.id), "version": 2}
    assert artifact.versions.get(number=2).note == "fix"
    # A retried update (the bridge sent it again) is that version, not a third.
    retried = frames.update_artifact(
        nova,
        {"type": "artifact.update", "artifactId": str(artifact.id), "content": '{"b": 2}'},
    )
    assert retried == updated and artifact.versions.count() == 2


def test_it_refuses_bad_artifact_frames_and_stores_nothing(alice, team_a, channel, nova):
    dm = conversation_actions.create_conversation(alice, team_a, kind="direct")
    good = {
        "type": "artifact.publish",
        "conversationId": str(channel.id),
        "title": "T",
        "kind": "markdown",
        "content": "c",
    }
    before = counts()
    for change, code in [
        ({"title": 7}, "bad_frame"),
        ({"content": None}, "bad_frame"),
        ({"kind": "exe"}, "bad_frame"),
        ({"content": "x" * (actions.MAX_CONTENT_BYTES + 1)}, "artifact_invalid"),
        ({"conversationId": str(dm.id)}, "conversation_not_found"),
        ({"conversationId": "nope"}, "conversation_not_found"),
    ]:
        with pytest.raises(AppError) as refused:
            frames.publish_artifact(nova, {**good, **change})
        assert refused.value.code == code, change
    with pytest.raises(AppError) as refused:
        frames.update_artifact(
            nova, {"type": "artifact.update", "artifactId": "nope", "content": "x"}
        )
    assert refused.value.code == "artifact_not_found"
    assert counts() == before


# Each payload tries a different way to run script; none may survive into rendered output.
XSS_PAYLOADS = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    "<svg onload=alert(1)><circle r=1></svg>",
    '<a href="javascript:alert(1)">click</a>',
    '<a href="JaVaScRiPt:alert(1)">mixed case</a>',
    '<a href="java\tscript:alert(1)">tab</a>',
    '<iframe src="https://evil.example.com"></iframe>',
    '<object data="data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg=="></object>',
    '<form action="https://evil.example.com"><input name="pw"></form>',
    '<div style="background:url(javascript:alert(1))">bg</div>',
    '<p style="width: expression(alert(1))">ie</p>',
    '<body onload="alert(1)">',
    '<math><a xlink:href="javascript:alert(1)">m</a></math>',
    '<img src="data:image/svg+xml;base64,PHN2Zz48L3N2Zz4=">',
    "[markdown link](javascript:alert(1))",
    "![markdown image](javascript:alert(1))",
    '<meta http-equiv="refresh" content="0;url=javascript:alert(1)">',
]

DANGEROUS_TAGS = {"script", "iframe", "object", "embed", "form", "input", "meta", "base", "link"}


class Tags(HTMLParser):
    """Every element and attribute a browser would build from the HTML."""

    def __init__(self, html):
        super().__init__()
        self.found = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))


def unsafe_parts(html):
    problems = []
    for tag, attrs in Tags(html).found:
        if tag in DANGEROUS_TAGS:
            problems.append(tag)
        for name, value in attrs.items():
            value = "".join((value or "").split()).lower()
            if name.startswith("on"):
                problems.append(f"{tag}[{name}]")
            if value.startswith(("javascript:", "data:text", "data:image/svg")):
                problems.append(f"{tag}[{name}]={value}")
            if name == "style" and ("url(" in value or "expression" in value):
                problems.append(f"{tag}[style]")
    return problems


@pytest.mark.parametrize("kind", ["markdown", "html"])
def test_it_never_returns_script_in_rendered_artifacts(alice, channel, api, kind):
    content = "\n\n".join(XSS_PAYLOADS) + "\n\n<p>kept <strong>safe</strong> text</p>"
    created = publish(api(alice), channel, kind=kind, content=content).json()
    edited = (
        api(alice)
        .post(
            f"/api/v1/artifacts/{created['id']}/versions/",
            {"content": content + "\n!"},
            format="json",
        )
        .json()
    )
    rendered = [
        created["version"],
        edited,
        api(alice).get(f"/api/v1/artifacts/{created['id']}/").json()["version"],
        api(alice).get(f"/api/v1/artifacts/{created['id']}/versions/1/").json(),
    ]
    diff = api(alice).get(f"/api/v1/artifacts/{created['id']}/diff/?from=1&to=2").json()
    for version in rendered:
        html = version["srcdoc"] if kind == "html" else version["html"]
        assert html and unsafe_parts(html) == []
        # HTML pages are only ever handed out for a sandboxed frame, never inline.
        assert version["html" if kind == "html" else "srcdoc"] is None
    assert unsafe_parts(diff["html"]) == []
    assert "safe" in rendered[0]["srcdoc" if kind == "html" else "html"]


def test_the_xss_check_itself_catches_each_payload():
    """Guards the guard: every payload is unsafe before sanitising (else the test proves nothing)."""
    raw = [p for p in XSS_PAYLOADS if not p.startswith(("[", "!"))]
    assert all(unsafe_parts(payload) for payload in raw)


def test_it_announces_a_new_version_to_the_conversation(
    alice, bob, team_a, channel, api, django_capture_on_commit_callbacks
):
    artifact = actions.publish_artifact(alice, channel, "Plan", "markdown", PLAN_V1)
    # Channels are open to the whole workspace: their events go to the workspace topic.
    inbox = TopicInbox(f"workspace.{team_a.id}")
    with django_capture_on_commit_callbacks(execute=True):
        actions.update_artifact(bob, artifact, PLAN_V2, note="hall")

    assert inbox.next() == {
        "type": "live.event",
        "event": {
            "type": "artifact.updated",
            "conversationId": str(channel.id),
            "artifact": {"id": str(artifact.id), "title": "Plan", "kind": "markdown", "version": 2},
            "author": {"type": "person", "id": str(bob.id), "name": "bob", "username": "bob"},
            "note": "hall",
        },
    }


def test_it_announces_a_comment_to_the_conversation(
    alice, bob, team_a, channel, api, django_capture_on_commit_callbacks
):
    artifact = actions.publish_artifact(alice, channel, "Plan", "markdown", PLAN_V1)
    inbox = TopicInbox(f"workspace.{team_a.id}")
    with django_capture_on_commit_callbacks(execute=True):
        comment = actions.comment_on_artifact(bob, artifact, "Looks good")

    assert inbox.next() == {
        "type": "live.event",
        "event": {
            "type": "artifact.commented",
            "conversationId": str(channel.id),
            "artifact": {"id": str(artifact.id), "title": "Plan", "kind": "markdown", "version": 1},
            "commentId": str(comment.id),
        },
    }
