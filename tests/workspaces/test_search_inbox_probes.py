"""Probes of search, the inbox and the audit log by a demanding and a hostile user. The cast:
Alice owns team A and Nova; Bob is her teammate, with his agent Rex; Charlie, in team B, is an
outsider."""

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test import Client, override_settings
from django.utils import timezone

from agents import actions as agent_actions
from conversations.actions import create_conversation, post_message
from conversations.models import Message
from conversations.tasks import create_task
from tests.conftest import agent_session, client_for
from work import search
from workspaces import actions as workspace_actions
from workspaces import notifications
from workspaces.models import Notification

pytestmark = pytest.mark.django_db


def ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [r["id"] for r in response.json()["results"]]


# ---- search -----------------------------------------------------------------------------------


@pytest.mark.parametrize("run", ["-" * 41, "- " * 41, "-!" * 41, "-(" * 41, "--" * 20 + "- "])
def test_a_long_run_of_minus_signs_is_a_query_not_a_500(alice, team_a, channel, run):
    """PostgreSQL's parser holds 32 negations in a row at most ("tsquery stack too small"): an odd
    run of them still excludes the word after it, as one minus sign does."""
    talk = post_message(alice, channel, "The budget talk.")
    post_message(alice, channel, "The budget secret.")
    query = f"budget {run}secret"
    assert ids(client_for(alice).get("/api/v1/search/", {"q": query})) == [str(talk.id)]
    page = Client()
    page.force_login(alice)
    response = page.get(f"/w/{team_a.id}/search/", {"q": query})
    assert response.status_code == 200
    assert f'data-hit-id="{talk.id}"' in response.content.decode()


def test_an_even_run_of_minus_signs_excludes_nothing(alice, channel):
    talk = post_message(alice, channel, "The budget talk.")
    secret = post_message(alice, channel, "The budget secret.")
    found = ids(client_for(alice).get("/api/v1/search/", {"q": "budget " + "-" * 40 + "secret"}))
    assert found == [str(secret.id)]
    assert str(talk.id) not in found


def test_a_nul_in_an_agents_query_is_a_space_not_an_error(alice, channel):
    """REST refuses a NUL (400); the agents' workspace_search tool hands its query on as given."""
    message = post_message(alice, channel, "The budget talk.")
    hits, _ = search.search(alice, "budget\x00")
    assert [h.id for h in hits] == [message.id]


def test_an_agent_whose_owner_left_finds_none_of_that_workspaces_tasks(alice, bob, team_a):
    """Its conversations there are hidden from it (conversations_visible_to); the tasks it was
    given there, and their instructions, were still found by its token: Bob, gone, read them."""
    rex = agent_actions.create_agent(bob, name="Rex", backend="scripted")
    room = create_conversation(alice, team_a, kind="channel", title="room", agent_ids=[rex.id])
    post_message(alice, room, "The zebra plan.")
    create_task(alice, team_a, rex, "Count the zebra herd.", conversation=room)
    create_task(alice, team_a, rex, "Private zebra numbers.")
    api = client_for(bob)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_session(rex)}")
    assert len(ids(api.get("/api/v1/search/", {"q": "zebra"}))) == 3
    workspace_actions.leave_workspace(team_a.memberships.get(user=bob))
    assert ids(api.get("/api/v1/search/", {"q": "zebra"})) == []
    assert ids(api.get("/api/v1/search/", {"q": "zebra", "type": "task"})) == []


@override_settings(SEARCHES_PER_MINUTE=60, SEARCHES_BURST=2)
def test_searches_past_the_rate_are_refused_with_429_at_every_door(alice, bob, team_a, channel):
    """A search ranks every match of its words (seconds for a common word in a big workspace):
    one person could keep the database busy with nothing to hold them back."""
    post_message(alice, channel, "The budget talk.")
    api = client_for(alice)
    assert all(len(ids(api.get("/api/v1/search/", {"q": "budget"}))) == 1 for _ in range(2))
    refused = api.get("/api/v1/search/", {"q": "budget"})
    assert refused.status_code == 429 and refused["Retry-After"] == "1"
    assert refused.json()["error"]["code"] == "rate_limited"
    page = Client()
    page.force_login(alice)
    response = page.get(f"/w/{team_a.id}/search/", {"q": "budget"})
    assert response.status_code == 429
    assert "Too many searches: try again in 1 second." in response.content.decode()
    # Counted per person: Bob searches as before.
    assert len(ids(client_for(bob).get("/api/v1/search/", {"q": "budget"}))) == 1


def test_pages_go_as_deep_for_every_page_size_and_never_promise_one_past_the_last(alice, channel):
    """Pages stop 1000 results deep. With 20 a page that was page 20 (only 400 deep), which still
    said hasMore while page 21 was refused; with 50 a page, page 20 said hasMore too."""
    Message.objects.bulk_create(
        Message(conversation=channel, author_user=alice, body=f"Ledger entry {n}.")
        for n in range(search.MAX_OFFSET + 1)
    )
    api = client_for(alice)
    deep = api.get("/api/v1/search/", {"q": "ledger", "limit": 20, "page": 21})
    assert len(ids(deep)) == 20 and deep.json()["hasMore"] is True
    last = api.get("/api/v1/search/", {"q": "ledger", "limit": 20, "page": 50})
    assert len(ids(last)) == 20 and last.json()["hasMore"] is False
    assert api.get("/api/v1/search/", {"q": "ledger", "limit": 20, "page": 51}).status_code == 400
    last = api.get("/api/v1/search/", {"q": "ledger", "limit": 50, "page": 20})
    assert len(ids(last)) == 50 and last.json()["hasMore"] is False
    refused = api.get("/api/v1/search/", {"q": "ledger", "limit": 50, "page": 21})
    assert refused.status_code == 400
    assert refused.json()["error"]["fields"] == {"page": "Results go 20 pages deep at most."}


# ---- the inbox --------------------------------------------------------------------------------


def fill_inbox(person, workspace) -> None:
    """PERSON's inbox full: MAX_KEPT old items, "old 0" the oldest."""
    start = timezone.now() - timedelta(days=30)
    Notification.objects.bulk_create(
        Notification(
            user=person,
            workspace=workspace,
            kind="direct",
            text=f"old {n}",
            link="/",
            created_at=start + timedelta(seconds=n),
        )
        for n in range(notifications.MAX_KEPT)
    )


def test_an_inbox_keeps_the_newest_and_drops_the_oldest_past_its_bound(alice, bob, team_a):
    """Each post of a direct conversation adds one item for each other person in it: a year of
    them grew the inbox (and what marking all read sends in one event) without end."""
    fill_inbox(bob, team_a)
    post_message(alice, create_conversation(alice, team_a, kind="channel", title="x"), "@bob hi")
    kept = Notification.objects.filter(user=bob)
    assert kept.count() == notifications.MAX_KEPT
    assert not kept.filter(text="old 0").exists()
    assert kept.filter(text="old 1").exists() and kept.filter(kind="mention").exists()
    assert Notification.objects.filter(user=alice).count() == 0
    api = client_for(bob)
    marked = api.post("/api/v1/notifications/read-all/", {}, format="json")
    assert marked.status_code == 200 and marked.json()["marked"] == notifications.MAX_KEPT


@pytest.mark.django_db(transaction=True)
def test_dropping_the_oldest_never_waits_on_a_row_another_transaction_holds(alice, bob, team_a):
    """Two posts notifying the same two people in opposite orders would each wait on the row the
    other is dropping: a deadlock. A held row is left for the next time instead."""
    fill_inbox(bob, team_a)
    oldest = Notification.objects.get(user=bob, text="old 0")
    held, done = threading.Event(), threading.Event()

    def hold():
        with transaction.atomic():
            Notification.objects.select_for_update().get(pk=oldest.pk)
            held.set()
            done.wait(10)
        connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")  # waiting on it fails the test, not hangs
        channel = create_conversation(alice, team_a, kind="channel", title="x")
        post_message(alice, channel, "@bob one")
        assert Notification.objects.filter(pk=oldest.pk).exists()
    finally:
        done.set()
        holder.join(10)
    post_message(alice, channel, "@bob two")
    assert not Notification.objects.filter(pk=oldest.pk).exists()
    assert Notification.objects.filter(user=bob).count() == notifications.MAX_KEPT
