"""core.compiled: a queryset's SQL compiled once, then bound to other values."""

import uuid

import pytest

from agntchat.core import compiled
from agntchat.core.compiled import compiled_objects
from conversations.access import access_conversation
from conversations.exceptions import ConversationNotFound
from workspaces.models import Membership, User

pytestmark = pytest.mark.django_db


def members(workspace_id, username):
    return User.objects.filter(memberships__workspace_id=workspace_id, username=username)


def test_one_compiled_shape_answers_for_every_value(alice, bob, charlie, team_a, team_b):
    shape = ("test", uuid.uuid4().hex)
    first = list(compiled_objects(shape, members, workspace_id=team_a.id, username="bob"))
    sql_after_first = compiled._cache[shape].sql
    again = list(compiled_objects(shape, members, workspace_id=team_b.id, username="charlie"))
    none = list(compiled_objects(shape, members, workspace_id=team_b.id, username="bob"))
    assert [u.pk for u in first] == [bob.pk]
    assert [u.pk for u in again] == [charlie.pk]
    assert none == []
    assert compiled._cache[shape].sql is sql_after_first  # compiled once


def test_a_value_the_sql_does_not_bind_is_refused(team_a):
    with pytest.raises(ValueError, match="does not bind"):
        list(
            compiled_objects(
                ("test", uuid.uuid4().hex),
                lambda workspace_id, username: Membership.objects.filter(workspace_id=workspace_id),
                workspace_id=team_a.id,
                username="x",
            )
        )


def test_access_through_compiled_sql_still_tells_people_apart(alice, charlie, channel):
    assert access_conversation(alice, channel.id).takes_part is True
    with pytest.raises(ConversationNotFound):
        access_conversation(charlie, channel.id)
    with pytest.raises(ConversationNotFound):
        access_conversation(alice, "not-a-uuid")


def test_a_compiled_insert_stores_what_save_would(alice, channel, nova):
    from django.db import IntegrityError, transaction

    from agntchat.core.compiled import compiled_insert
    from conversations.models import Delivery, Message

    stored = []
    for body in ("first", "second"):  # the second runs the SQL compiled for the first
        message = Message(
            conversation=channel, author_user=alice, body=body, payload={"card": {"k": [1, 2]}}
        )
        compiled_insert(message)
        stored.append(message)
    for message in stored:
        again = Message.objects.get(pk=message.pk)
        assert (again.body, again.payload, again.created_at, again.author_user_id) == (
            message.body,
            message.payload,
            message.created_at,
            alice.pk,
        )
        assert message.created_at is not None and not message._state.adding
    delivery = Delivery(agent=nova, workspace_id=channel.workspace_id, message=stored[0])
    compiled_insert(delivery, ignore_conflicts=True)
    duplicate = Delivery(agent=nova, workspace_id=channel.workspace_id, message=stored[0])
    compiled_insert(duplicate, ignore_conflicts=True)  # one delivery per agent and message
    assert Delivery.objects.filter(message=stored[0]).count() == 1
    with pytest.raises(IntegrityError), transaction.atomic():
        compiled_insert(Delivery(agent=nova, workspace_id=channel.workspace_id, message=stored[0]))


def test_rows_inserted_together_are_one_statement_with_what_follows_them(alice, channel, nova):
    from django.db import DatabaseError, connection, transaction
    from django.test.utils import CaptureQueriesContext

    from agntchat.core.compiled import compiled_insert
    from conversations.models import Delivery, Message

    message = Message(conversation=channel, author_user=alice, body="together")
    delivery = Delivery(agent=nova, workspace_id=channel.workspace_id, message=message)
    with CaptureQueriesContext(connection) as statements:
        rows = compiled_insert(
            message,
            delivery,
            # THEN may add CTEs of its own, and is asked for once the rows' values are set.
            then=lambda: (
                ", t AS (SELECT %s::timestamptz AS at) SELECT at FROM t",
                [message.created_at],
            ),
        )
    assert len(statements.captured_queries) == 1
    assert rows == [(message.created_at,)] and message.created_at is not None
    assert Delivery.objects.get(message=message).agent_id == nova.id
    assert not message._state.adding and not delivery._state.adding

    # All or nothing: when the statement after them fails, none of the rows is stored.
    doomed = Message(conversation=channel, author_user=alice, body="never stored")
    with pytest.raises(DatabaseError), transaction.atomic():
        compiled_insert(doomed, then=lambda: ("SELECT 1 / 0", []))
    assert not Message.objects.filter(body="never stored").exists()
