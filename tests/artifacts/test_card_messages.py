"""Cards in the conversation: Nova posts results, Alice and Bob use the buttons, staff edit the
template library, and nothing of it reaches Charlie."""

import copy
from html import escape

import pytest
from django.contrib.admin.sites import site

from agntchat.core.exceptions import AppError
from artifacts import actions, frames
from artifacts.card_library import SEED_TEMPLATES
from artifacts.cards import render_card_html
from artifacts.cards_store import seal_card_payload
from artifacts.exceptions import CardInvalid
from artifacts.models import CardTemplate
from conversations import actions as conversation_actions
from conversations.models import Delivery, Message, Task
from tests.conftest import agent_session, make_person
from tests.socket_helpers import TopicInbox

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def library(db):
    """The seeded template library (a transactional test elsewhere may have emptied the table)."""
    actions.seed_card_templates()


def hotel(**overrides):
    item = {
        "title": "Memmo Alfama",
        "subtitle": "Alfama",
        "image": "https://images.example.com/memmo.jpg",
        "price": {"amount": 229, "currency": "EUR", "period": "night"},
        "rating": 4.5,
        "chips": ["Pool"],
        "actions": [
            {"id": "book", "label": "Book", "style": "primary", "once": True},
            {"id": "more_like_this", "label": "More like this"},
        ],
        "data": {"hotel_id": "lis-1"},
    }
    return {**item, **overrides}


def hotels(**top):
    return {"type": "hotels", "title": "Hotels in Lisbon", "items": [hotel()], **top}


def email_draft():
    return copy.deepcopy(next(t["sample"] for t in SEED_TEMPLATES if t["name"] == "email_draft"))


def post_card(agent, conversation, card, **extra):
    frame = {"type": "card.post", "conversationId": str(conversation.id), "card": card, **extra}
    return Message.objects.get(pk=frames.post_card(agent, frame)["messageId"])


def card_html_via_api(client, message):
    history = client.get(f"/api/v1/conversations/{message.conversation_id}/messages/").json()
    return next(m["cardHtml"] for m in history["results"] if m["id"] == str(message.id))


def click(client, message, item_index, action_id):
    return client.post(
        f"/api/v1/messages/{message.id}/card-actions/",
        {"itemIndex": item_index, "actionId": action_id},
        format="json",
    )


def test_it_seals_the_resolved_layout_into_the_message(channel, nova):
    reply = frames.post_card(
        nova,
        {
            "type": "card.post",
            "conversationId": str(channel.id),
            "card": hotels(),
            "body": "Two options",
            "ref": "work:9",
        },
    )
    message = Message.objects.get(pk=reply["messageId"])
    assert reply == {"type": "posted", "messageId": str(message.id), "ref": "work:9"}
    assert message.author_agent == nova and message.body == "Two options"
    sealed = message.payload["card_layout"]
    assert (sealed["template"], sealed["version"], sealed["requested"]) == ("hotels", 1, None)
    assert sealed["layout"] == CardTemplate.objects.get(name="hotels").layout
    assert message.payload["card"]["items"][0]["price"] == {
        "amount": 229,
        "currency": "EUR",
        "period": "night",
    }


def test_it_renders_a_sent_card_unchanged_after_its_template_is_edited_and_deleted(
    alice, channel, nova, api
):
    sent = post_card(nova, channel, hotels())
    before = card_html_via_api(api(alice), sent)
    assert 'data-template="hotels" data-template-version="1"' in before
    assert 'class="card__media"' in before
    template = CardTemplate.objects.get(name="hotels")
    template.layout = {"style": "compact", "title": "title", "badges": ["price"]}
    actions.save_card_template(template)
    assert CardTemplate.objects.get(name="hotels").version == 2
    assert card_html_via_api(api(alice), sent) == before
    # A card sent now uses the edited layout: no photo, version 2.
    edited = post_card(nova, channel, hotels())
    edited_html = card_html_via_api(api(alice), edited)
    assert 'data-template-version="2"' in edited_html
    assert "card__media" not in edited_html
    actions.delete_card_template(CardTemplate.objects.get(name="hotels"))
    assert card_html_via_api(api(alice), sent) == before
    assert card_html_via_api(api(alice), edited) == edited_html
    served = api(alice).get(f"/api/v1/messages/{edited.id}/card/").json()
    assert served["html"] == edited_html and served["json"]["version"] == 2


def test_it_falls_back_to_the_type_default_for_an_unknown_template(alice, channel, nova, api):
    message = post_card(nova, channel, hotels(template="no_such_template"))
    sealed = message.payload["card_layout"]
    assert (sealed["template"], sealed["requested"]) == ("hotels", "no_such_template")
    # A retired template counts as missing too.
    CardTemplate.objects.filter(name="flights").update(is_active=False)
    retired = post_card(nova, channel, hotels(template="flights"))
    assert retired.payload["card_layout"]["template"] == "hotels"


def test_it_shows_an_unknown_type_as_a_generic_list_never_raw_data(alice, channel, nova, api):
    card = {
        "type": "mystery_things",
        "items": [{"title": "A thing", "fields": [{"label": "Colour", "value": "teal"}]}],
    }
    message = post_card(nova, channel, card)
    html = card_html_via_api(api(alice), message)
    assert 'data-card-type="mystery_things" data-template="generic_list"' in html
    assert "<dt>Colour</dt><dd>teal</dd>" in html
    assert "{" not in html and "'label'" not in html
    served = api(alice).get(f"/api/v1/messages/{message.id}/card/").json()
    assert served["json"]["template"] == "generic_list"
    assert served["json"]["items"][0]["elements"][1] == {
        "kind": "rows",
        "rows": [{"label": "Colour", "value": "teal"}],
    }


@pytest.mark.parametrize("template", SEED_TEMPLATES, ids=[t["name"] for t in SEED_TEMPLATES])
def test_it_posts_and_renders_each_seeded_sample(alice, channel, nova, api, template):
    message = post_card(nova, channel, copy.deepcopy(template["sample"]))
    html = card_html_via_api(api(alice), message)
    assert f'data-template="{template["name"]}" data-template-version="1"' in html
    items = template["sample"]["items"]
    assert html.count('<li class="card" ') == len(items)
    for item in items:
        assert f">{escape(item['title'])}<" in html
    assert html == render_card_html(message.payload["card"], message.payload["card_layout"])
    served = api(alice).get(f"/api/v1/messages/{message.id}/card/").json()
    assert served["html"] == html
    assert served["json"]["template"] == template["name"]
    assert len(served["json"]["items"]) == len(items)


def test_it_lists_the_template_library(bob, team_a, api):
    listed = api(bob).get("/api/v1/card-templates/").json()["results"]
    assert [t["name"] for t in listed] == sorted(t["name"] for t in SEED_TEMPLATES)
    draft = next(t for t in listed if t["name"] == "email_draft")
    assert [a["id"] for a in draft["defaultActions"]] == ["send", "save_draft"]


def test_a_button_click_becomes_one_message_for_the_author_agent(
    alice, bob, channel, nova, api, django_capture_on_commit_callbacks
):
    card_message = post_card(nova, channel, hotels())
    response = click(api(bob), card_message, 0, "more_like_this")
    assert response.status_code == 200, response.json()
    action = Message.objects.get(kind=Message.Kind.ACTION)
    delivery = Delivery.objects.get(message=action)
    assert response.json()["work"] == {
        "type": "message",
        "id": str(action.id),
        "delivery": str(delivery.id),
    }
    assert action.author_user == bob
    assert action.body == "bob chose “More like this” on “Memmo Alfama”"
    assert action.payload == {
        "card_message_id": str(card_message.id),
        "action_id": "more_like_this",
        "item_index": 0,
        "item": {"title": "Memmo Alfama", "data": {"hotel_id": "lis-1"}},
    }
    # Delivered to the card's author, as work, and to no one else.
    assert list(Delivery.objects.filter(message=action).values_list("agent_id", flat=True)) == [
        nova.id
    ]
    # The work item the page's Stop stops: the agent's topic is told to stop it.
    inbox = TopicInbox(f"agent.{nova.id}")
    with django_capture_on_commit_callbacks(execute=True):
        stop = api(bob).post(
            f"/api/v1/conversations/{channel.id}/stop/", {"work": str(delivery.id)}, format="json"
        )
    assert stop.status_code == 202, stop.json()
    heard = inbox.all(quiet=0.5)
    assert heard == [{"type": "turn.stop", "id": str(delivery.id)}], heard
    card_message.refresh_from_db()
    assert card_message.payload["card_outcomes"] == {
        "0:more_like_this": {"status": "done", "label": "More like this ✓", "by": str(bob.id)}
    }
    html = response.json()["message"]["cardHtml"]
    assert (
        'data-card-action="more_like_this" data-item-index="0" data-outcome="done" disabled>'
        in html
    )
    assert card_html_via_api(api(alice), card_message) == html


def test_a_click_re_announces_the_card_with_its_outcome(
    alice, team_a, channel, nova, api, django_capture_on_commit_callbacks
):
    card_message = post_card(nova, channel, hotels())
    inbox = TopicInbox(f"workspace.{team_a.id}")
    with django_capture_on_commit_callbacks(execute=True):
        actions.use_card_action(alice, card_message, 0, "book")

    updates = [
        e["event"]["message"] for e in inbox.all() if e["event"]["type"] == "message.updated"
    ]
    assert [m["id"] for m in updates] == [str(card_message.id)]
    assert 'data-card-action="book" data-item-index="0" data-once="true"' in updates[0]["cardHtml"]
    assert 'data-outcome="done" disabled>Book ✓</button>' in updates[0]["cardHtml"]


def test_a_once_button_refuses_its_second_use(alice, bob, channel, nova, api):
    card_message = post_card(nova, channel, hotels())
    assert click(api(alice), card_message, 0, "book").status_code == 200
    again = click(api(bob), card_message, 0, "book")
    assert again.status_code == 409 and again.json()["error"]["code"] == "action_used"
    assert Message.objects.filter(kind=Message.Kind.ACTION).count() == 1
    assert Delivery.objects.filter(message__kind=Message.Kind.ACTION).count() == 1
    card_message.refresh_from_db()
    assert card_message.payload["card_outcomes"]["0:book"]["by"] == str(alice.id)
    # A button that is not `once` may be used again: each use is a new signal to the agent.
    assert click(api(alice), card_message, 0, "more_like_this").status_code == 200
    assert click(api(bob), card_message, 0, "more_like_this").status_code == 200
    assert Message.objects.filter(kind=Message.Kind.ACTION).count() == 3


def test_it_refuses_the_buttons_of_a_card_a_person_posted(alice, bob, channel, api):
    card_message = actions.post_card(alice, channel, hotels())
    before = (Message.objects.count(), Task.objects.count())
    response = click(api(bob), card_message, 0, "book")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "card_action_unavailable"
    assert "was not posted by an agent" in response.json()["error"]["message"]
    card_message.refresh_from_db()
    assert "card_outcomes" not in card_message.payload
    assert (Message.objects.count(), Task.objects.count()) == before


def test_the_card_of_an_agent_deleted_since_says_so(alice, bob, channel, nova, api):
    card_message = actions.post_card(nova, channel, hotels())
    nova.delete()
    response = click(api(bob), card_message, 0, "book")
    assert response.status_code == 409
    assert response.json()["error"] == {
        "code": "card_action_unavailable",
        "message": "This card lost its agent, so its buttons have no one to reach.",
    }


def test_it_refuses_clicks_that_name_no_button(alice, channel, nova, api):
    card_message = post_card(nova, channel, hotels())
    plain = conversation_actions.post_message(alice, channel, "no card here")
    before = Message.objects.count()
    # Malformed clicks are a 400; well-formed ones naming nothing the card shows, a 404.
    for message, body, field, status in [
        (card_message, {"itemIndex": 3, "actionId": "book"}, "itemIndex", 404),
        (card_message, {"itemIndex": 0, "actionId": "delete_everything"}, "actionId", 404),
        (card_message, {"itemIndex": -1, "actionId": "book"}, "itemIndex", 400),
        (card_message, {"itemIndex": "0", "actionId": "book"}, "itemIndex", 400),
        (card_message, {"actionId": "book"}, "itemIndex", 400),
        (plain, {"itemIndex": 0, "actionId": "book"}, None, 404),
    ]:
        response = api(alice).post(
            f"/api/v1/messages/{message.id}/card-actions/", body, format="json"
        )
        assert response.status_code == status, body
        if field:
            assert field in response.json()["error"]["fields"], body
    # Hidden by its layout, a button does not exist: weather cards show no actions.
    weather = post_card(
        nova, channel, {"type": "weather", "items": [hotel(title="Lisbon", image=None)]}
    )
    assert click(api(alice), weather, 0, "book").status_code == 404
    assert Message.objects.count() == before + 1
    card_message.refresh_from_db()
    assert "card_outcomes" not in card_message.payload


def test_outsiders_and_agents_cannot_use_or_read_cards(
    alice, charlie, team_b, channel, nova, api, client
):
    card_message = post_card(nova, channel, hotels())
    before = Message.objects.count()
    used = click(api(charlie), card_message, 0, "book")
    assert used.status_code == 404 and used.json()["error"]["code"] == "message_not_found"
    read = api(charlie).get(f"/api/v1/messages/{card_message.id}/card/")
    assert read.status_code == 404
    # An agent reads the card but does not click buttons: clicks are people's signals.
    headers = {"HTTP_AUTHORIZATION": f"Bearer {agent_session(nova)}"}
    assert client.get(f"/api/v1/messages/{card_message.id}/card/", **headers).status_code == 200
    by_agent = client.post(
        f"/api/v1/messages/{card_message.id}/card-actions/",
        {"itemIndex": 0, "actionId": "book"},
        content_type="application/json",
        **headers,
    )
    assert by_agent.status_code == 403
    plain = conversation_actions.post_message(alice, channel, "text only")
    no_card = api(alice).get(f"/api/v1/messages/{plain.id}/card/")
    assert no_card.status_code == 404 and no_card.json()["error"]["code"] == "card_not_found"
    card_message.refresh_from_db()
    assert "card_outcomes" not in card_message.payload
    assert Message.objects.count() == before + 1


HUGE_TEXT = "x" * 4000
MALFORMED_CARDS = [
    ("not a card", "card"),
    ({"items": [{"title": "t"}]}, "card.type"),
    ({"type": "Hotels!", "items": [{"title": "t"}]}, "card.type"),
    ({"type": "hotels", "items": []}, "card.items"),
    ({"type": "hotels", "items": [{"subtitle": "no title"}]}, "card.items[0].title"),
    ({"type": "hotels", "items": [{"title": "t", "rating": "five"}]}, "card.items[0].rating"),
    ({"type": "hotels", "items": [{"title": "t", "rating": 9}]}, "card.items[0].rating"),
    (
        {"type": "hotels", "items": [{"title": "t", "image": "javascript:alert(1)"}]},
        "card.items[0].image",
    ),
    (
        {"type": "hotels", "items": [{"title": "t", "url": "data:text/html,<script>"}]},
        "card.items[0].url",
    ),
    (
        {"type": "hotels", "items": [{"title": "t", "actions": [{"id": "Go!", "label": "Go"}]}]},
        "card.items[0].actions[0].id",
    ),
    ({"type": "hotels", "items": [{"title": "t"}], "html": "<b>raw</b>"}, "card.html"),
    ({"type": "hotels", "items": [{"title": "t", "text": HUGE_TEXT}] * 20}, "card"),
]


@pytest.mark.parametrize(("card", "field"), MALFORMED_CARDS)
def test_it_rejects_malformed_cards_and_stores_nothing(alice, channel, nova, card, field):
    before = (Message.objects.count(), Delivery.objects.count())
    frame = {"type": "card.post", "conversationId": str(channel.id), "card": card, "ref": "r1"}
    with pytest.raises(CardInvalid) as refused:
        frames.post_card(nova, frame)
    assert refused.value.code == "card_invalid" and refused.value.status == 400
    assert list(refused.value.fields) == [field]
    # The same rule holds for anything posting a card without a frame.
    with pytest.raises(CardInvalid):
        actions.post_card(nova, channel, card, "look")
    assert (Message.objects.count(), Delivery.objects.count()) == before


def test_it_refuses_a_card_frame_without_a_card(channel, nova):
    with pytest.raises(AppError) as refused:
        frames.post_card(nova, {"type": "card.post", "conversationId": str(channel.id)})
    assert refused.value.code == "bad_frame"
    assert not Message.objects.exists()


def test_a_poster_cannot_forge_outcomes_or_a_layout(channel, nova):
    forged = {"card": hotels(), "card_outcomes": {"0:book": {"status": "done"}}, "card_layout": {}}
    payload = seal_card_payload(forged)
    assert "card_outcomes" not in payload
    assert payload["card_layout"]["template"] == "hotels"


def test_staff_edit_templates_in_the_admin_with_validation_and_versions(client):
    staff = make_person("stella")
    staff.is_staff = staff.is_superuser = True
    staff.save()
    client.force_login(staff)
    template = CardTemplate.objects.get(name="news")
    url = f"/admin/artifacts/cardtemplate/{template.id}/change/"
    form = {
        "name": "news",
        "result_type": "news",
        "description": "Headlines",
        "layout": '{"style": "list", "title": "title", "badges": ["stars"]}',
        "default_actions": "[]",
        "sample": "null",
        "is_active": "on",
    }
    refused = client.post(url, form)
    assert refused.status_code == 200  # the form again, with the error
    assert "layout.badges[0]: must be price or rating, each once" in refused.content.decode()
    assert CardTemplate.objects.get(pk=template.id).version == 1
    form["layout"] = '{"style": "list", "title": "title", "body": "text"}'
    saved = client.post(url, form)
    assert saved.status_code == 302
    template.refresh_from_db()
    assert (template.version, template.description) == (2, "Headlines")
    assert template.layout["body"] == "text" and template.layout["media"] is None
    assert site.is_registered(CardTemplate)
