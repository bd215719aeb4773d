"""Channel names: unique per workspace among live channels, case-insensitive, written as Slack
writes them; channels renamed and archived over REST by their creator or a workspace admin.

Alice owns team A and created #general there; Bob is a member; Charlie is an outsider."""

import pytest
from django.db import IntegrityError, connection, transaction

from agntchat.core.exceptions import AppError
from conversations.actions import create_conversation, post_message
from conversations.channels import channel_name
from conversations.models import Conversation, Message
from tests.concurrency import run_together
from tests.conftest import agent_session
from workspaces import actions as workspace_actions
from workspaces.models import Role

pytestmark = pytest.mark.django_db

URL = "/api/v1/conversations/"


@pytest.mark.parametrize(
    "raw, name",
    [
        ("general", "general"),
        ("General", "general"),
        ("  #Team Planning ", "team-planning"),
        ("q3 budget.v2", "q3-budget-v2"),
        ("snake_case ok", "snake_case-ok"),
        ("a -- b", "a-b"),
        ("-edges-", "edges"),
        ("Héllo Wörld", "héllo-wörld"),
        ("ＦＵＬＬ width", "full-width"),
        ("launch 🎉 party!", "launch-party"),
        ("x" * 100, "x" * 80),
        ("!!!", ""),
        ("   ", ""),
    ],
)
def test_names_are_normalised_as_slack_does(raw, name):
    assert channel_name(raw) == name


def create(client, workspace, title, kind="channel"):
    return client.post(URL, {"workspace": str(workspace.id), "kind": kind, "title": title}, "json")


def test_a_name_is_taken_whatever_its_case_spacing_or_hash(alice, bob, team_a, channel, api):
    assert channel.title == "general"
    for title in ("general", "General", " #GENERAL ", "general."):
        response = create(api(bob), team_a, title)
        assert response.status_code == 409, title
        assert response.json()["error"]["code"] == "channel_name_taken"
        assert response.json()["error"]["fields"] == {
            "title": "Already taken: choose another name."
        }
    assert Conversation.objects.filter(workspace=team_a, kind="channel").count() == 1


def test_names_are_stored_normalised_and_free_in_other_workspaces(
    alice, charlie, team_b, channel, api
):
    response = create(api(charlie), team_b, "General")
    assert response.status_code == 201 and response.json()["title"] == "general"
    # Direct conversations keep their titles as written, and may share them (those of other
    # people: asked again, the same people's direct conversation is the one they have).
    for person in (alice, charlie):
        workspace = team_b if person == charlie else channel.workspace
        created = create(api(person), workspace, "My Notes", kind="direct")
        assert created.status_code == 201 and created.json()["title"] == "My Notes"


@pytest.mark.parametrize("title", ["", "   ", "!!!", "#"])
def test_a_channel_needs_a_name(alice, team_a, api, title):
    response = create(api(alice), team_a, title)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "conversation_invalid"
    assert "title" in response.json()["error"]["fields"]
    assert not Conversation.objects.exists()


def test_the_database_refuses_a_second_live_channel_of_a_name(alice, team_a, channel):
    with pytest.raises(IntegrityError), transaction.atomic():
        Conversation.objects.create(workspace=team_a, kind="channel", title="GENERAL")
    Conversation.objects.create(workspace=team_a, kind="direct", title="general")
    channel.archived_at = channel.created_at
    channel.save(update_fields=["archived_at"])
    Conversation.objects.create(workspace=team_a, kind="channel", title="general")


@pytest.mark.django_db(transaction=True)
def test_two_people_creating_the_same_channel_at_once_make_one(alice, bob, team_a):
    def create_general(person):
        create_conversation(person, team_a, kind="channel", title="General")
        return "created"

    # Any other exception (an IntegrityError: a 500) is raised here.
    created = run_together(create_general, [(alice,), (bob,)], catching=AppError)
    outcomes = [getattr(outcome, "code", outcome) for outcome in created]
    assert sorted(outcomes) == ["channel_name_taken", "created"]
    assert Conversation.objects.filter(kind="channel").count() == 1


def test_the_creator_renames_a_channel(alice, team_a, channel, api):
    other = create_conversation(alice, team_a, kind="channel", title="random")
    response = api(alice).patch(f"{URL}{channel.id}/", {"title": "Team Room"}, "json")
    assert response.status_code == 200, response.json()
    assert response.json()["title"] == "team-room"
    # Another channel's name, in any case, is refused and changes nothing.
    response = api(alice).patch(f"{URL}{other.id}/", {"title": "TEAM room"}, "json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "channel_name_taken"
    other.refresh_from_db()
    assert other.title == "random"
    # Renaming to its own name is no conflict.
    assert api(alice).patch(f"{URL}{other.id}/", {"title": "Random"}, "json").status_code == 200


def test_an_archived_channel_frees_its_name_keeps_its_history_and_takes_no_posts(
    alice, bob, team_a, channel, api, client
):
    post_message(bob, channel, "before the archive")
    response = api(alice).patch(f"{URL}{channel.id}/", {"archived": True}, "json")
    assert response.status_code == 200 and response.json()["archivedAt"] is not None
    # Its history stays readable; nothing new is posted.
    history = api(bob).get(f"{URL}{channel.id}/messages/").json()["results"]
    assert [m["body"] for m in history] == ["before the archive"]
    posted = api(bob).post(f"{URL}{channel.id}/messages/", {"body": "hello?"}, "json")
    assert posted.status_code == 409
    assert posted.json()["error"]["code"] == "conversation_archived"
    assert Message.objects.count() == 1
    # It leaves the sidebar; its name is free again.
    client.force_login(bob)
    sidebar = client.get(f"/app/w/{team_a.id}/sidebar/").content.decode()
    assert str(channel.id) not in sidebar
    assert create(api(bob), team_a, "general").status_code == 201
    # So unarchiving it now would make two: refused.
    response = api(alice).patch(f"{URL}{channel.id}/", {"archived": False}, "json")
    assert response.status_code == 409
    channel.refresh_from_db()
    assert channel.archived_at is not None


def test_a_member_who_did_not_create_the_channel_may_not_change_it(
    alice, bob, charlie, team_a, channel, api, nova
):
    for change in ({"title": "mine"}, {"archived": True}):
        response = api(bob).patch(f"{URL}{channel.id}/", change, "json")
        assert response.status_code == 403, change
        assert response.json()["error"]["code"] == "not_allowed"
        # Another workspace's person: it does not exist.
        response = api(charlie).patch(f"{URL}{channel.id}/", change, "json")
        assert response.status_code == 404, change
        assert response.json()["error"]["code"] == "conversation_not_found"
    # Agents do not configure channels.
    agent = api(alice)
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_session(nova)}")
    assert agent.patch(f"{URL}{channel.id}/", {"archived": True}, "json").status_code == 403
    channel.refresh_from_db()
    assert (channel.title, channel.archived_at) == ("general", None)


def test_a_workspace_admin_may_change_any_channel(alice, bob, team_a, channel, api):
    owner = team_a.memberships.get(user=alice)
    workspace_actions.change_role(owner, team_a.memberships.get(user=bob), Role.ADMIN)
    response = api(bob).patch(f"{URL}{channel.id}/", {"title": "announcements"}, "json")
    assert response.status_code == 200 and response.json()["title"] == "announcements"


@pytest.mark.parametrize(
    "change", [{}, {"title": ""}, {"title": "!!"}, {"archived": "maybe"}, {"kind": "direct"}]
)
def test_bad_changes_are_400_and_change_nothing(alice, team_a, channel, api, change):
    response = api(alice).patch(f"{URL}{channel.id}/", change, "json")
    assert response.status_code == 400, change
    assert "error" in response.json()
    channel.refresh_from_db()
    assert (channel.title, channel.archived_at) == ("general", None)


def test_only_channels_are_renamed(alice, team_a, api):
    dm = create_conversation(alice, team_a, kind="direct", title="notes")
    response = api(alice).patch(f"{URL}{dm.id}/", {"title": "other"}, "json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "conversation_invalid"


@pytest.mark.django_db(transaction=True)
def test_the_migration_gives_existing_channels_unique_normalised_names(alice, team_a, team_b):
    from django.db.migrations.executor import MigrationExecutor

    before = [("conversations", "0015_delivery_answered_at")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps.get_model("conversations", "Conversation")
        titles = ["General", "general", " #general ", "Team Planning", "", "!!"]
        for title in titles:
            old.objects.create(workspace_id=team_a.id, kind="channel", title=title)
        old.objects.create(workspace_id=team_b.id, kind="channel", title="General")
        old.objects.create(workspace_id=team_a.id, kind="direct", title="General")
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    channels = Conversation.objects.filter(workspace=team_a, kind="channel").order_by("created_at")
    assert list(channels.values_list("title", flat=True)) == [
        "general",  # the oldest keeps the name
        "general-2",
        "general-3",
        "team-planning",
        "channel",
        "channel-2",
    ]
    assert Conversation.objects.get(workspace=team_b).title == "general"
    assert Conversation.objects.get(kind="direct").title == "General"


def test_the_new_channel_page_says_the_name_is_taken(client, bob, team_a, channel):
    client.force_login(bob)
    response = client.post(f"/w/{team_a.id}/channels/new/", {"title": "General"})
    assert response.status_code == 200
    assert (
        "There is already a channel named #general in this workspace." in response.content.decode()
    )
    assert Conversation.objects.filter(kind="channel").count() == 1


def test_an_archived_channels_threads_are_archived_with_it(alice, bob, team_a, channel, api, nova):
    """Its people's reply threads and its agents' side threads take nothing new either: posts,
    reactions, an agent's post; nor does the channel take a new agent."""
    from conversations.actions import add_agent_to_conversation, react_message, reply_in_thread
    from conversations.exceptions import ConversationArchived

    said = post_message(bob, channel, "the plan")
    reply = reply_in_thread(alice, said, "looks good")
    thread = reply.conversation
    assert api(alice).patch(f"{URL}{channel.id}/", {"archived": True}, "json").status_code == 200
    posted = api(bob).post(f"{URL}{thread.id}/messages/", {"body": "still here?"}, "json")
    assert posted.status_code == 409 and posted.json()["error"]["code"] == "conversation_archived"
    for attempt in (
        lambda: post_message(nova, thread, "an agent, still working"),
        lambda: react_message(bob, reply, "👍"),
        lambda: add_agent_to_conversation(alice, channel, nova),
    ):
        with pytest.raises(ConversationArchived):
            attempt()
    assert Message.objects.filter(conversation=thread).count() == 1
