"""Conversations and messages over REST, for people and agents, with tenant isolation."""

import pytest

from conversations import actions
from conversations.models import Conversation, Delivery, Message
from tests.conftest import agent_session

pytestmark = pytest.mark.django_db


def test_a_person_opens_a_conversation_and_posts(alice, bob, team_a, nova, api):
    response = api(alice).post(
        "/api/v1/conversations/",
        {
            "workspace": str(team_a.id),
            "kind": "channel",
            "title": "research",
            "participants": [
                {"type": "person", "id": str(bob.id)},
                {"type": "agent", "id": str(nova.id)},
            ],
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    conversation_id = response.json()["id"]
    posted = api(bob).post(
        f"/api/v1/conversations/{conversation_id}/messages/", {"body": "Hi **all**"}, format="json"
    )
    assert posted.status_code == 201
    assert posted.json()["author"] == {
        "type": "person",
        "id": str(bob.id),
        "name": "bob",
        "username": "bob",
    }
    # One delivery for the one agent, none for people.
    assert list(Delivery.objects.values_list("agent_id", flat=True)) == [nova.id]


def test_participants_must_belong_to_the_workspace(alice, charlie, team_a, api):
    response = api(alice).post(
        "/api/v1/conversations/",
        {
            "workspace": str(team_a.id),
            "kind": "direct",
            "participants": [{"type": "person", "id": str(charlie.id)}],
        },
        format="json",
    )
    assert response.status_code == 400
    assert Conversation.objects.count() == 0


def test_history_pages_back_and_forward(alice, channel, api):
    messages = [actions.post_message(alice, channel, f"m{i}") for i in range(7)]
    client = api(alice)
    newest = client.get(f"/api/v1/conversations/{channel.id}/messages/?limit=3").json()
    assert [m["body"] for m in newest["results"]] == ["m4", "m5", "m6"] and newest["hasMore"]
    older = client.get(
        f"/api/v1/conversations/{channel.id}/messages/?limit=3&before={messages[4].id}"
    ).json()
    assert [m["body"] for m in older["results"]] == ["m1", "m2", "m3"]
    after = client.get(
        f"/api/v1/conversations/{channel.id}/messages/?after={messages[4].id}"
    ).json()
    assert [m["body"] for m in after["results"]] == ["m5", "m6"]
    bad = client.get(f"/api/v1/conversations/{channel.id}/messages/?limit=0")
    assert bad.status_code == 400 and "limit" in bad.json()["error"]["fields"]


def test_an_agent_uses_the_message_endpoints_of_its_conversations(alice, channel, nova, client):
    token = agent_session(nova)
    actions.post_message(alice, channel, "question")
    listed = client.get(
        f"/api/v1/conversations/{channel.id}/messages/", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert listed.status_code == 200 and listed.json()["results"][0]["body"] == "question"
    posted = client.post(
        f"/api/v1/conversations/{channel.id}/messages/",
        {"body": "answer"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert posted.status_code == 201 and posted.json()["author"]["type"] == "agent"


def test_an_agent_outside_a_conversation_gets_404(alice, team_a, nova, client):
    private = actions.create_conversation(alice, team_a, kind="direct", title="no agents")
    token = agent_session(nova)
    before = Message.objects.count()
    for response in [
        client.get(
            f"/api/v1/conversations/{private.id}/messages/", HTTP_AUTHORIZATION=f"Bearer {token}"
        ),
        client.post(
            f"/api/v1/conversations/{private.id}/messages/",
            {"body": "x"},
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        ),
    ]:
        assert response.status_code == 404
    assert Message.objects.count() == before


def test_outsiders_get_404_and_nothing_is_written(alice, charlie, channel, team_a, team_b, api):
    dm = actions.create_conversation(alice, team_a, kind="direct")
    message = actions.post_message(alice, channel, "secret plans")
    client = api(charlie)
    before = (Message.objects.count(), Conversation.objects.count())
    for conversation in (channel, dm):
        assert client.get(f"/api/v1/conversations/{conversation.id}/").status_code == 404
        assert client.get(f"/api/v1/conversations/{conversation.id}/messages/").status_code == 404
        assert (
            client.post(
                f"/api/v1/conversations/{conversation.id}/messages/", {"body": "hi"}, format="json"
            ).status_code
            == 404
        )
    assert (
        client.post(
            "/api/v1/conversations/",
            {"workspace": str(team_a.id), "kind": "channel"},
            format="json",
        ).status_code
        == 404
    )
    other = actions.create_conversation(charlie, team_b, kind="channel", title="shop")
    assert (
        client.get(f"/api/v1/conversations/{other.id}/messages/?after={message.id}").status_code
        == 404
    )
    assert (Message.objects.count(), Conversation.objects.count()) == (before[0], before[1] + 1)
    assert str(channel.id) not in client.get("/api/v1/conversations/").content.decode()


def test_a_member_not_in_a_direct_conversation_cannot_read_it(alice, bob, team_a, api):
    dm = actions.create_conversation(alice, team_a, kind="direct", title="alice only")
    assert api(bob).get(f"/api/v1/conversations/{dm.id}/messages/").status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"body": ""},
        {"body": "   "},
        {"body": 5},
        {"body": "x" * 20001},
        {"body": "x", "extra": 1},
    ],
)
def test_bad_message_bodies_are_400(alice, channel, api, body):
    response = api(alice).post(f"/api/v1/conversations/{channel.id}/messages/", body, format="json")
    assert response.status_code == 400
    assert Message.objects.count() == 0
