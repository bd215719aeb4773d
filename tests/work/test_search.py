"""Search (work/search.py) through its three doors: GET /api/v1/search/, the search page and the
agents' workspace_search tool. The cast: Alice owns team A, Bob is her teammate, Nova is Alice's
agent in #general; Charlie, in team B, must find nothing of team A."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from artifacts import actions as artifact_actions
from artifacts.models import Artifact
from conversations.actions import create_conversation, open_direct, post_message
from conversations.models import Message
from conversations.tasks import create_task
from tests.conftest import agent_session, client_for, make_person
from tests.work.tooling import held_message
from work import search
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.django_db


def ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [r["id"] for r in response.json()["results"]]


def person_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def budget(alice, bob, team_a, channel, nova):
    """Messages, an artifact and a task about the budget in team A; private talk beside them."""
    strong = post_message(bob, channel, "Budget, budget: the budget review sets the budget.")
    weak = post_message(alice, channel, "The budget came up once among other things.")
    artifact = artifact_actions.publish_artifact(
        nova, channel, "Budget plan", "markdown", "Budget lines for the year."
    )
    task = create_task(alice, team_a, nova, "Prepare the budget numbers.", conversation=channel)
    direct, _ = open_direct(alice, team_a, user_ids=[bob.id])
    private = post_message(alice, direct, "Our private budget talk.")
    return {
        "strong": str(strong.id),
        "weak": str(weak.id),
        "artifact": str(artifact.id),
        "task": str(task.id),
        "private": str(private.id),
        "direct": direct,
    }


def test_it_ranks_better_matches_first_over_every_kind(alice, budget):
    response = client_for(alice).get("/api/v1/search/", {"q": "budget"})
    found = ids(response)
    # (With the message that announced the artifact, which names it.)
    assert set(found) >= {budget[k] for k in ("strong", "weak", "artifact", "task", "private")}
    assert len(found) == 6
    assert found.index(budget["strong"]) < found.index(budget["weak"])
    ranks = [r["rank"] for r in response.json()["results"]]
    assert ranks == sorted(ranks, reverse=True)
    first = response.json()["results"][found.index(budget["strong"])]
    assert first["kind"] == "message" and first["author"]["name"] == "bob"
    assert first["conversation"] == "general" and response.json()["hasMore"] is False


def test_it_shows_only_what_each_person_can_see(alice, bob, charlie, team_b, budget):
    room = create_conversation(charlie, team_b, kind="channel", title="b-room")
    secret = post_message(charlie, room, "The budget of team B is secret.")
    assert str(secret.id) not in ids(client_for(alice).get("/api/v1/search/", {"q": "budget"}))
    assert ids(client_for(charlie).get("/api/v1/search/", {"q": "budget"})) == [str(secret.id)]
    # Bob takes part in the direct conversation; Charlie was never in team A.
    assert budget["private"] in ids(client_for(bob).get("/api/v1/search/", {"q": "private"}))
    assert ids(client_for(charlie).get("/api/v1/search/", {"q": "private"})) == []


def test_a_private_conversation_stays_private_within_the_workspace(alice, team_a, budget):
    erin = make_person("erin")
    _, token = workspace_actions.create_invitation(team_a.memberships.get(user=alice))
    workspace_actions.accept_invitation(erin, token)
    found = ids(client_for(erin).get("/api/v1/search/", {"q": "budget"}))
    assert budget["strong"] in found and budget["private"] not in found


def test_filters_narrow_by_conversation_author_type_and_time(alice, bob, nova, budget, channel):
    api = client_for(alice)
    direct = str(budget["direct"].id)
    assert ids(api.get("/api/v1/search/", {"q": "budget", "conversation": direct})) == [
        budget["private"]
    ]
    by_bob = ids(api.get("/api/v1/search/", {"q": "budget", "author": str(bob.id)}))
    assert by_bob == [budget["strong"]]
    by_nova = ids(api.get("/api/v1/search/", {"q": "budget", "author": str(nova.id)}))
    announced = str(Artifact.objects.get(pk=budget["artifact"]).message_id)
    assert set(by_nova) == {budget["artifact"], announced}
    assert ids(api.get("/api/v1/search/", {"q": "budget", "type": "artifact"})) == [
        budget["artifact"]
    ]
    assert ids(api.get("/api/v1/search/", {"q": "budget", "type": "task"})) == [budget["task"]]
    # The weak message moved to last week: a date range finds it alone, or leaves it out.
    week_ago = timezone.now() - timedelta(days=7)
    Message.objects.filter(pk=budget["weak"]).update(created_at=week_ago)
    day = week_ago.date().isoformat()
    only = ids(api.get("/api/v1/search/", {"q": "budget", "since": day, "until": day}))
    assert only == [budget["weak"]]
    recent = ids(api.get("/api/v1/search/", {"q": "budget", "since": timezone.now().date()}))
    assert budget["weak"] not in recent and budget["strong"] in recent


def test_pages_follow_each_other_without_overlap(alice, channel):
    for n in range(25):
        post_message(alice, channel, f"Ledger entry number {n}.")
    api = client_for(alice)
    first = api.get("/api/v1/search/", {"q": "ledger", "limit": 20})
    second = api.get("/api/v1/search/", {"q": "ledger", "limit": 20, "page": 2})
    assert len(ids(first)) == 20 and first.json()["hasMore"] is True
    assert len(ids(second)) == 5 and second.json()["hasMore"] is False
    assert not set(ids(first)) & set(ids(second))


def test_highlights_are_offsets_into_plain_text(alice, channel):
    post_message(alice, channel, "Fix the <b>budget</b> &amp; 1 < 2, the budget.")
    result = client_for(alice).get("/api/v1/search/", {"q": "budget"}).json()["results"][0]
    assert result["text"] == "Fix the <b>budget</b> &amp; 1 < 2, the budget."
    assert [result["text"][a:b] for a, b in result["highlights"]] == ["budget", "budget"]


def test_the_page_escapes_what_was_written_and_marks_the_matches(alice, team_a, channel):
    post_message(alice, channel, 'The budget: <script>alert("x")</script> 1 < 2 && <scr<b>ipt>')
    page = person_client(alice).get(f"/w/{team_a.id}/search/", {"q": "budget"})
    html = page.content.decode()
    assert page.status_code == 200
    assert "<script>alert" not in html and "<b>" not in html
    # Shown as written (PostgreSQL's headline alone would drop what looks like a tag), escaped.
    assert (
        "<mark>budget</mark>: &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; 1 &lt; 2 &amp;&amp; "
        "&lt;scr&lt;b&gt;ipt&gt;"
    ) in html
    assert f'href="/w/{team_a.id}/c/{channel.id}/#msg-' in html


def test_the_page_filters_and_refuses_bad_filters(alice, bob, team_a, channel, budget):
    client = person_client(alice)
    url = f"/w/{team_a.id}/search/"
    narrowed = client.get(url, {"q": "budget", "author": str(bob.id)}).content.decode()
    assert f'data-hit-id="{budget["strong"]}"' in narrowed
    assert f'data-hit-id="{budget["weak"]}"' not in narrowed
    bad = client.get(url, {"q": "budget", "since": "yesterday"})
    assert bad.status_code == 400 and "data-hit-id" not in bad.content.decode()
    # Every workspace page has the search box in its header.
    box = client.get(f"/w/{team_a.id}/c/{channel.id}/").content.decode()
    assert f'action="/w/{team_a.id}/search/"' in box and 'id="header-search"' in box


def test_another_workspaces_user_gets_404(alice, charlie, team_a, team_b, channel):
    assert person_client(charlie).get(f"/w/{team_a.id}/search/", {"q": "x"}).status_code == 404
    api = client_for(charlie)
    for params in ({"workspace": str(team_a.id)}, {"conversation": str(channel.id)}):
        response = api.get("/api/v1/search/", {"q": "budget", **params})
        assert response.status_code == 404, params
    assert api.get("/api/v1/search/", {"q": "x", "workspace": str(team_b.id)}).status_code == 200


@pytest.mark.parametrize(
    "params, field",
    [
        ({}, "q"),
        ({"q": ""}, "q"),
        ({"q": "x" * 201}, "q"),
        ({"q": "x", "type": "file"}, "type"),
        ({"q": "x", "author": "bob"}, "author"),
        ({"q": "x", "since": "2026-02-30"}, "since"),
        ({"q": "x", "until": "soon"}, "until"),
        ({"q": "x", "since": "2026-05-02", "until": "2026-05-01"}, "until"),
        ({"q": "x", "until": "9999-12-31"}, "until"),  # its end of day is past year 9999
        ({"q": "x", "page": "0"}, "page"),
        ({"q": "x", "limit": "51"}, "limit"),
    ],
)
def test_bad_parameters_are_refused_with_the_field_named(alice, params, field):
    response = client_for(alice).get("/api/v1/search/", params)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid" and field in error["fields"]


def test_the_tool_and_the_rest_api_give_the_same_hits(alice, team_a, channel, nova, budget):
    held = held_message(nova, channel, alice)
    tool = held.output("workspace_search", {"query": "budget", "limit": 20})["results"]
    api = client_for(alice)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_session(nova)}")
    rest = ids(api.get("/api/v1/search/", {"q": "budget", "workspace": str(team_a.id)}))
    assert [r["id"] for r in tool] == rest
    # Nova does not take part in Alice and Bob's direct conversation.
    assert budget["private"] not in rest and budget["strong"] in rest
    assert any(r["text"] == "Prepare the **budget** numbers." for r in tool)
    # And a person's page, REST answer and the search itself agree too.
    hits, _ = search.search(alice, "budget", search.Filters(workspace_id=team_a.id))
    person = ids(client_for(alice).get("/api/v1/search/", {"q": "budget"}))
    assert [str(h.id) for h in hits] == person


def test_an_artifact_is_found_by_its_title_or_its_current_content(alice, nova, channel):
    titled = artifact_actions.publish_artifact(nova, channel, "Harbour plan", "markdown", "Dates.")
    written = artifact_actions.publish_artifact(nova, channel, "Notes", "markdown", "Old text.")
    artifact_actions.update_artifact(alice, written, "The harbour opens in May.")
    stale = artifact_actions.publish_artifact(nova, channel, "Draft", "markdown", "harbour")
    artifact_actions.update_artifact(alice, stale, "Nothing about it now.")
    api = client_for(alice)
    found = ids(api.get("/api/v1/search/", {"q": "harbour", "type": "artifact"}))
    assert found == [str(titled.id), str(written.id)]  # the title counts more


def snippet(user, words) -> tuple[str, list[str]]:
    """The one hit of WORDS for USER over REST: its text, and the words it highlights."""
    (hit,) = client_for(user).get("/api/v1/search/", {"q": words}).json()["results"]
    return hit["text"], [hit["text"][a:b] for a, b in hit["highlights"]]


def test_snippets_are_plain_text_without_markdown_marks(alice, team_a, channel, nova):
    """Emphasis, backticks, heading hashes and link syntax go, also where the snippet cuts a
    link or an emphasis in two; the words and the matches' marks stay, and so does what only
    looks like a mark (snake_case, a * between numbers, #general)."""
    post_message(
        alice,
        channel,
        "## Launch day\nWe **launch** on `Thursday`: see [the *launch* note](https://x.example/"
        "a_b), later",
    )
    post_message(alice, channel, "Meet at the **harbour** at _nine_, artifact_publish runs 2 * 3")
    lead = " ".join(f"word{n}" for n in range(40))
    post_message(alice, channel, f"{lead} [the *zebra* note](https://x.example/a_b) in #general")

    # Its snippet ends inside the link: "[the *launch* note" in PostgreSQL's headline.
    text, marked = snippet(alice, "launch")
    assert text == "Launch day\nWe launch on Thursday: see the launch note"
    assert marked == ["Launch", "launch", "launch"]
    # Underscores inside a word and a lone * stay.
    assert snippet(alice, "harbour") == (
        "Meet at the harbour at nine, artifact_publish runs 2 * 3",
        ["harbour"],
    )
    assert snippet(alice, "zebra") == ("word38 word39 the zebra note in #general", ["zebra"])
    # A snippet may also start inside a link or an emphasis (as in the probe's "… a **side").
    assert search.plain_markdown("zebra* note](https://x.example/a_b) in a **side") == (
        "zebra note in a side"
    )

    page = person_client(alice).get(f"/w/{team_a.id}/search/", {"q": "launch"}).content.decode()
    assert "We <mark>launch</mark> on Thursday: see the <mark>launch</mark> note" in page
    held = held_message(nova, channel, alice)
    (hit,) = held.output("workspace_search", {"query": "launch"})["results"]
    assert hit["text"] == "**Launch** day\nWe **launch** on Thursday: see the **launch** note"
