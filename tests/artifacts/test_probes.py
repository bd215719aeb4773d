"""Probes of result cards, their buttons and the email draft: each test names a hole found by
trying it (an email sent twice, a click reaching an agent no longer in the channel, ...)."""

import copy

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.actions import set_agent_pins
from artifacts import actions, frames
from artifacts.card_library import SEED_TEMPLATES
from conversations.actions import remove_agent_from_conversation, update_channel
from conversations.models import Delivery, Message
from tests.integrations import standin_fixtures
from tests.integrations.google_github_standin import connect
from workspaces.models import AuditEntry

pytestmark = pytest.mark.django_db

google_api = standin_fixtures.google_api


@pytest.fixture(autouse=True)
def library(db):
    actions.seed_card_templates()


@pytest.fixture
def bobs_gmail(bob, google_api):
    google_api.add_token("tok-bob", "bob@example.com")
    connect("google", "tok-bob", "bob@example.com", user=bob)
    return google_api


def email_draft(**send):
    card = copy.deepcopy(next(t["sample"] for t in SEED_TEMPLATES if t["name"] == "email_draft"))
    if send:
        card["items"][0]["actions"] = [{"id": "send", "label": "Send", **send}]
    return card


BOOKABLE = {
    "type": "hotels",
    "items": [{"title": "Memmo", "actions": [{"id": "book", "label": "Book"}]}],
}


def post_card(agent, conversation, card):
    frame = {"type": "card.post", "conversationId": str(conversation.id), "card": card}
    return Message.objects.get(pk=frames.post_card(agent, frame)["messageId"])


def click(client, message, action_id, item_index=0):
    return client.post(
        f"/api/v1/messages/{message.id}/card-actions/",
        {"itemIndex": item_index, "actionId": action_id},
        format="json",
    )


def test_an_agents_send_button_without_once_still_sends_the_email_once(
    bob, channel, nova, api, bobs_gmail
):
    card = post_card(nova, channel, email_draft(once=False))
    assert click(api(bob), card, "send").status_code == 200
    again = click(api(bob), card, "send")
    assert again.status_code == 409, again.json()
    assert again.json()["error"]["code"] == "action_used"
    # Nor is the sent email saved as a draft again.
    assert click(api(bob), card, "save_draft").status_code == 409
    assert len(bobs_gmail.sent("bob@example.com")) == 1
    assert bobs_gmail.box("bob@example.com").drafts == {}


@pytest.mark.parametrize("how", ["removed from the channel", "pinned to another workspace"])
def test_a_click_on_the_card_of_an_agent_gone_from_the_channel_reaches_no_one(
    alice, bob, channel, nova, api, how
):
    card = post_card(nova, channel, BOOKABLE)
    if how == "removed from the channel":
        remove_agent_from_conversation(alice, channel, nova.id)
    else:
        set_agent_pins(nova, [alice.owned_workspaces.get(kind="personal").id])
    answer = click(api(bob), card, "book")
    assert answer.status_code == 409, answer.json()
    assert answer.json()["error"]["code"] == "card_action_unavailable"
    assert not Delivery.objects.filter(agent=nova, message__kind=Message.Kind.ACTION).exists()
    card.refresh_from_db()
    assert "card_outcomes" not in card.payload


def test_send_on_an_archived_channel_sends_nothing(alice, bob, channel, nova, api, bobs_gmail):
    card = post_card(nova, channel, email_draft())
    update_channel(alice, channel, archived=True)
    answer = click(api(bob), card, "send")
    assert answer.status_code == 409, answer.json()
    assert answer.json()["error"]["code"] == "conversation_archived"
    assert bobs_gmail.sent("bob@example.com") == []
    card.refresh_from_db()
    assert "card_outcomes" not in card.payload


def test_save_draft_clicks_count_against_the_post_rate(
    bob, channel, nova, api, bobs_gmail, settings
):
    # Each click writes to Bob's mailbox and re-renders the card for everyone watching it.
    settings.PERSON_POSTS_PER_MINUTE = settings.PERSON_POSTS_BURST = 3
    card = post_card(nova, channel, email_draft())
    codes = [click(api(bob), card, "save_draft").status_code for _ in range(5)]
    assert codes == [200, 200, 200, 429, 429]
    assert len(bobs_gmail.requests) == 3


def test_exports_are_rate_limited_per_person(alice, team_a, channel, api):
    # Each archive copies the whole workspace to disk: a loop of requests could fill it.
    client = api(alice)
    codes = [client.get(f"/api/v1/workspaces/{team_a.id}/export/").status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    refused = client.get(f"/api/v1/workspaces/{team_a.id}/export/")
    assert refused.json()["error"]["code"] == "rate_limited"
    assert int(refused["Retry-After"]) > 0
    assert AuditEntry.objects.filter(action="workspace.exported").count() == 2


def test_the_version_history_does_not_load_every_versions_content(alice, channel, api):
    # Each version holds up to 500 KB twice (source and rendering): a long history read whole
    # would put gigabytes in memory for a list that shows neither.
    artifact = actions.publish_artifact(alice, channel, "Plan", "markdown", "# v1")
    actions.update_artifact(alice, artifact, "# v2 " + "x" * 1000, note="longer")
    with CaptureQueriesContext(connection) as queries:
        listed = api(alice).get(f"/api/v1/artifacts/{artifact.id}/versions/")
    assert listed.status_code == 200
    assert [v["number"] for v in listed.json()["results"]] == [1, 2]
    assert listed.json()["results"][1]["note"] == "longer"
    reads = [q["sql"] for q in queries.captured_queries if "artifactversion" in q["sql"]]
    assert reads and not any('."content"' in sql or '."rendered"' in sql for sql in reads)


def test_every_to_row_the_card_shows_receives_the_email(bob, channel, nova, api, bobs_gmail):
    # Two To rows on the card: Bob sees both addresses, so both get the email (not the last).
    card = email_draft()
    card["items"][0]["fields"] = [
        {"label": "To", "value": "ana.costa@example.com"},
        {"label": "to", "value": "boss@example.com"},
        {"label": "Cc", "value": "finance@example.com"},
    ]
    message = post_card(nova, channel, card)
    assert click(api(bob), message, "send").status_code == 200
    (email,) = bobs_gmail.sent("bob@example.com")
    assert email["To"] == "ana.costa@example.com, boss@example.com"
    assert email["Cc"] == "finance@example.com"
