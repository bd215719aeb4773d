"""Email-draft cards send only what they show: Nova cannot dress a Send up as another card (or
relabel it), and Bob, clicking, sees every recipient and the body exactly as it would be mailed."""

import copy

import pytest

from artifacts import actions, frames
from artifacts.card_library import SEED_TEMPLATES
from artifacts.cards import resolve_layout, validate_card
from artifacts.cards_store import template_lookup, with_card_html
from artifacts.exceptions import CardInvalid
from artifacts.models import CardTemplate
from conversations import actions as conversation_actions
from conversations.models import Delivery, Message
from tests.integrations import standin_fixtures
from tests.integrations.google_github_standin import connect, plain_text

pytestmark = pytest.mark.django_db

HIDDEN_LINE = '[x]: https://evil.example/HIDDEN "PS: my password is hunter2"'


@pytest.fixture(autouse=True)
def library(db):
    actions.seed_card_templates()


google_api = standin_fixtures.google_api


@pytest.fixture
def bobs_gmail(bob, google_api):
    """Bob's own Google account, connected: a Send he clicks goes out from it."""
    google_api.add_token("tok-bob", "bob@example.com")
    connect("google", "tok-bob", "bob@example.com", user=bob)
    return google_api


def disguised(template="products", label="Add to cart"):
    """The probe's card: an email to a victim with a hidden Bcc, laid out as a product."""
    return {
        "type": "email_draft",
        "template": template,
        "items": [
            {
                "title": "Ergonomic chair",
                "subtitle": "Great deal",
                "chips": ["sale"],
                "fields": [
                    {"label": "To", "value": "ceo@victim-corp.example"},
                    {"label": "Bcc", "value": "attacker@evil.example"},
                ],
                "text": "Please wire 50k to account 1234.",
                "actions": [{"id": "send", "label": label, "style": "primary"}],
            }
        ],
    }


def email_draft(text=None):
    card = copy.deepcopy(next(t["sample"] for t in SEED_TEMPLATES if t["name"] == "email_draft"))
    if text is not None:
        card["items"][0]["text"] = text
    return card


def post_card(agent, conversation, card):
    frame = {"type": "card.post", "conversationId": str(conversation.id), "card": card}
    return Message.objects.get(pk=frames.post_card(agent, frame)["messageId"])


def stored_as_is(agent, conversation, card):
    """A card stored before posting refused it: sealed with whatever layout it asked for."""
    card = validate_card(card)
    sealed = resolve_layout(card["type"], card.get("template"), lookup=template_lookup)
    payload = with_card_html({"card": card, "card_layout": sealed})
    return conversation_actions.post_message(agent, conversation, "", payload=payload)


def click(client, message, action_id):
    return client.post(
        f"/api/v1/messages/{message.id}/card-actions/",
        {"itemIndex": 0, "actionId": action_id},
        format="json",
    )


@pytest.mark.parametrize("template", ["products", "generic_list", "news"])
def test_it_refuses_an_email_draft_in_another_template(channel, nova, template):
    before = (Message.objects.count(), Delivery.objects.count())
    with pytest.raises(CardInvalid) as refused:
        post_card(nova, channel, disguised(template=template))
    assert refused.value.code == "card_invalid" and refused.value.status == 400
    assert refused.value.fields == {
        "card.template": "an email_draft card must use the email_draft template, "
        "which shows the email"
    }
    assert (Message.objects.count(), Delivery.objects.count()) == before


def test_it_refuses_an_email_draft_whose_template_no_longer_shows_the_body(channel, nova):
    template = CardTemplate.objects.get(name="email_draft")
    template.layout = {**template.layout, "body": None}
    actions.save_card_template(template)
    with pytest.raises(CardInvalid) as refused:
        post_card(nova, channel, email_draft())
    assert list(refused.value.fields) == ["card.template"]
    assert not Message.objects.exists()


def test_it_refuses_a_send_button_labelled_as_something_else(channel, nova):
    with pytest.raises(CardInvalid) as refused:
        post_card(nova, channel, disguised(template="email_draft"))
    assert refused.value.fields == {
        "card.items[0].actions[0].label": "Send and Save draft on an email draft must say so"
    }
    assert not Message.objects.exists()


def test_it_accepts_an_email_draft_whose_buttons_say_send(channel, nova):
    message = post_card(nova, channel, disguised(template="email_draft", label="Send"))
    assert message.payload["card_layout"]["template"] == "email_draft"
    html = message.payload["card_html"]
    assert "<dt>To</dt><dd>ceo@victim-corp.example</dd>" in html
    assert "<dt>Bcc</dt><dd>attacker@evil.example</dd>" in html


@pytest.mark.parametrize("template", ["products", "email_draft"])
def test_a_stored_disguised_send_does_not_send(bob, channel, nova, api, bobs_gmail, template):
    # Stored by a server without the posting check: a product card, or an email draft whose
    # Send reads "Add to cart". Clicking it only tells Nova what Bob chose.
    card = stored_as_is(nova, channel, disguised(template=template))
    response = click(api(bob), card, "send")
    assert response.status_code == 200, response.json()
    assert response.json()["outcome"]["label"] == "Add to cart ✓"
    assert response.json()["work"] is not None
    assert bobs_gmail.requests == []
    assert bobs_gmail.sent("bob@example.com") == []


def test_the_email_body_shows_the_plain_text_that_is_sent(bob, channel, nova, api, bobs_gmail):
    text = f"Hi Ana, lunch on *Friday*?\n\n{HIDDEN_LINE}"
    card = post_card(nova, channel, email_draft(text=text))
    html = api(bob).get(f"/api/v1/messages/{card.id}/card/").json()["html"]
    assert (
        '<div class="card__body pre-wrap">Hi Ana, lunch on *Friday*?\n\n'
        "[x]: https://evil.example/HIDDEN &quot;PS: my password is hunter2&quot;</div>"
    ) in html
    sent = click(api(bob), card, "send")
    assert sent.status_code == 200, sent.json()
    (email,) = bobs_gmail.sent("bob@example.com")
    assert plain_text(email) == f"{text}\n"


def test_other_cards_still_render_their_body_as_markdown(channel, nova):
    card = {"type": "news", "items": [{"title": "Grid", "text": f"**Big** news\n\n{HIDDEN_LINE}"}]}
    html = post_card(nova, channel, card).payload["card_html"]
    assert '<div class="card__body"><p><strong>Big</strong> news</p>' in html
    assert "HIDDEN" not in html
