"""Search reads each row's stored search vector (a trigger keeps it as the text changes), never
computes one at query time: a common word in a big workspace cost seconds. The cast: Alice owns
team A, Bob is her teammate, Nova is Alice's agent in #general."""

from types import SimpleNamespace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agntchat.core.search import fill_vectors
from artifacts import actions as artifact_actions
from artifacts.models import Artifact, ArtifactVersion
from conversations.actions import delete_message, edit_message, post_message
from conversations.models import Message, Task
from conversations.tasks import create_task
from work import search

pytestmark = pytest.mark.django_db


def found(actor, text: str) -> set:
    return {hit.id for hit in search.search(actor, text)[0]}


def stored_right(model, pk, text_sql: str) -> bool:
    """Whether the row's stored vector is the one its text gives now (TEXT_SQL: the text)."""
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT search_vector = to_tsvector('english', {text_sql}) FROM {table} WHERE id = %s",
            [pk],
        )
        return cursor.fetchone()[0]


def test_it_ranks_and_matches_on_stored_vectors(alice, team_a, channel, nova):
    post_message(alice, channel, "The budget review.")
    artifact_actions.publish_artifact(nova, channel, "Budget plan", "markdown", "Budget lines.")
    create_task(alice, team_a, nova, "Prepare the budget numbers.", conversation=channel)
    with CaptureQueriesContext(connection) as queries:
        assert len(search.search(alice, "budget")[0]) == 4  # with the artifact's announcement
    sql = " ".join(q["sql"] for q in queries.captured_queries)
    assert "to_tsvector" not in sql and "search_vector" in sql


def test_an_edited_message_is_found_by_its_new_text_only(alice, channel):
    said = post_message(alice, channel, "Meet at the harbour.")
    assert found(alice, "harbour") == {said.id}
    edit_message(alice, said, "Meet at the lighthouse.")
    assert found(alice, "harbour") == set()
    assert found(alice, "lighthouse") == {said.id}
    assert stored_right(Message, said.id, "body")


def test_any_write_of_the_text_rewrites_the_vector(alice, channel):
    said = post_message(alice, channel, "Meet at the harbour.")
    loaded = Message.objects.get(pk=said.pk)  # with the vector as it is now
    loaded.body = "Meet at the lighthouse."
    loaded.save()  # every column, the old vector too: the trigger writes the new one
    assert found(alice, "lighthouse") == {said.id} and stored_right(Message, said.id, "body")
    Message.objects.filter(pk=said.pk).update(body="Meet at the pier.")
    assert found(alice, "pier") == {said.id} and found(alice, "lighthouse") == set()
    # A write of other columns keeps it, whatever vector the writer sends.
    Message.objects.filter(pk=said.pk).update(reply_count=3, search_vector="")
    assert stored_right(Message, said.id, "body")


def test_the_migration_fills_the_rows_written_before_it(alice, channel):
    said = [post_message(alice, channel, f"Harbour note {n}.") for n in range(5)]
    with connection.cursor() as cursor:  # as before the migration: no trigger, no vectors
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute("UPDATE conversations_message SET search_vector = NULL")
        cursor.execute("SET LOCAL session_replication_role = origin")
    assert found(alice, "harbour") == set()
    fill_vectors("conversations_message", batch=2).code(
        None, SimpleNamespace(connection=connection)
    )
    assert found(alice, "harbour") == {m.id for m in said}
    assert all(stored_right(Message, m.id, "body") for m in said)


def test_a_deleted_message_is_found_no_more(alice, channel):
    said = post_message(alice, channel, "The lighthouse code is 4412.")
    delete_message(alice, said)
    assert found(alice, "lighthouse") == set()
    assert stored_right(Message, said.id, "body")
    assert Message.objects.values_list("search_vector", flat=True).get(pk=said.pk) == ""


def test_an_updated_artifact_is_found_by_its_current_version(nova, channel):
    artifact = artifact_actions.publish_artifact(
        nova, channel, "Plan", "markdown", "Sail to the harbour."
    )
    artifact_actions.update_artifact(nova, artifact, "Sail to the lighthouse.")
    assert found(nova, "lighthouse") == {artifact.id}
    assert artifact.id not in found(nova, "harbour")
    for version in ArtifactVersion.objects.filter(artifact=artifact):
        assert stored_right(ArtifactVersion, version.id, "content")
    # A title changed in place (none of today's actions does) is matched as it is now.
    Artifact.objects.filter(pk=artifact.pk).update(title="Voyage")
    assert artifact.id in found(nova, "voyage") and stored_right(Artifact, artifact.id, "title")


def test_a_task_is_found_by_its_instructions(alice, team_a, nova, channel):
    task = create_task(alice, team_a, nova, "Count the harbour boats.", conversation=channel)
    assert found(alice, "boats") == {task.id}
    assert stored_right(Task, task.id, "instructions")


def test_ranks_are_those_of_the_text_itself(alice, bob, nova, team_a, channel):
    """The stored vectors rank as vectors computed from the text did (an artifact: its title
    weighted A, its current content B)."""
    post_message(bob, channel, "Budget, budget: the budget review sets the budget.")
    post_message(alice, channel, "The budget came up once among other things.")
    artifact_actions.publish_artifact(
        nova, channel, "Budget plan", "markdown", "Budget lines for the year."
    )
    create_task(alice, team_a, nova, "Prepare the budget numbers.", conversation=channel)
    query = "websearch_to_tsquery('english', 'budget')"
    text = {
        "message": "SELECT id, to_tsvector('english', body) FROM conversations_message",
        "task": "SELECT id, to_tsvector('english', instructions) FROM conversations_task",
        "artifact": "SELECT a.id, setweight(to_tsvector('english', a.title), 'A') || "
        "setweight(to_tsvector('english', v.content), 'B') FROM artifacts_artifact a "
        "JOIN artifacts_artifactversion v ON v.artifact_id = a.id "
        "AND v.number = a.current_version",
    }
    expected = {}
    with connection.cursor() as cursor:
        for kind, rows in text.items():
            cursor.execute(f"SELECT id, ts_rank(d, {query}) FROM ({rows}) AS t(id, d)")
            expected.update({(kind, pk): rank for pk, rank in cursor.fetchall()})
    hits = search.search(alice, "budget", limit=50)[0]
    assert len(hits) == 5
    assert {(h.kind, h.id): pytest.approx(h.rank) for h in hits} == {
        (h.kind, h.id): expected[(h.kind, h.id)] for h in hits
    }
