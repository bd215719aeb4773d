"""Probes of artifacts under concurrency: requests made at the same moment, each on its own
thread and database connection."""

import threading

import pytest
from django.db import connection, transaction

from artifacts import actions
from artifacts.models import Artifact, ArtifactVersion
from conversations.models import Conversation, Message
from tests.concurrency import sessions_waiting_on_me
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_one_ref_published_twice_at_once_is_one_artifact(alice, channel, nova):
    # A bridge that resends artifact.publish while its first send is still being stored: the ref
    # makes the second the same artifact, not a second one whose message is the first's.
    published = []

    def publish():
        try:
            artifact = actions.publish_artifact(
                nova, channel, "Plan", "markdown", "# v1", client_ref="pub-1"
            )
            published.append(artifact.id)
        finally:
            connection.close()

    senders = [threading.Thread(target=publish) for _ in range(2)]
    # Hold the conversation's row: both publishes get past their look for an earlier one with
    # this ref, then wait to store theirs (the new artifact's key check needs the row).
    with transaction.atomic():
        Conversation.objects.select_for_update().get(pk=channel.pk)
        for thread in senders:
            thread.start()
        wait_until(lambda: len(sessions_waiting_on_me()) >= 2, what="both publishes waiting")
    for thread in senders:
        thread.join(timeout=20)
    assert len(published) == 2
    (artifact,) = Artifact.objects.all()
    assert published == [artifact.id, artifact.id]
    assert ArtifactVersion.objects.filter(artifact=artifact).count() == 1
    message = Message.objects.get(client_ref="pub-1")
    assert artifact.message_id == message.id
    assert message.payload["artifact_id"] == str(artifact.id)


def test_edits_at_once_get_distinct_numbers_and_none_is_lost(alice, bob, channel, nova):
    artifact = actions.publish_artifact(alice, channel, "Plan", "markdown", "# v1")
    numbers = {}

    def edit(actor, text):
        try:
            numbers[text] = actions.update_artifact(actor, artifact, text).number
        finally:
            connection.close()

    editors = [
        threading.Thread(target=edit, args=(actor, text))
        for actor, text in ((alice, "# a"), (bob, "# b"), (nova, "# c"))
    ]
    with transaction.atomic():
        Artifact.objects.select_for_update().get(pk=artifact.pk)
        for thread in editors:
            thread.start()
        wait_until(lambda: len(sessions_waiting_on_me()) >= 3, what="every edit waiting")
    for thread in editors:
        thread.join(timeout=20)
    assert sorted(numbers.values()) == [2, 3, 4]
    stored = dict(
        ArtifactVersion.objects.filter(artifact=artifact).values_list("content", "number")
    )
    assert stored == {"# v1": 1, **numbers}
    artifact.refresh_from_db()
    assert artifact.current_version == 4
