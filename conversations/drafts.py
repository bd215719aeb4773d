"""The latest draft of each agent turn under way (streaming replies, issue 28), kept in Redis
so that a person who opens the conversation mid-turn sees the reply so far, not only the next
draft. Ephemeral: the turn's end deletes it, and a turn that dies unannounced leaves it for
DRAFT_TTL_SECONDS at most."""

import json
import time

from django.conf import settings

from agntchat.core.events import wire
from agntchat.core.presence import client

DRAFT_TTL_SECONDS = 180


def _key(conversation_id) -> str:
    # One hash per conversation: work id → {"at": epoch seconds, "event": the live event}.
    return f"{settings.REDIS_PREFIX}:drafts:{conversation_id}"


def keep_draft(conversation_id, work_id, event: dict) -> None:
    """Keep EVENT (a ``message.draft`` live event) as the latest draft of its turn."""
    key = _key(conversation_id)
    pipe = client().pipeline()
    pipe.hset(key, str(work_id), json.dumps({"at": time.time(), "event": wire(event)}))
    pipe.expire(key, DRAFT_TTL_SECONDS)
    pipe.execute()


def drop_draft(conversation_id, work_id) -> None:
    """The turn ended (its reply posted, stopped, or failed): its draft is no longer news."""
    client().hdel(_key(conversation_id), str(work_id))


def drafts_in(conversation_id) -> list[dict]:
    """The latest draft of each turn under way in the conversation, as the live events that
    brought them (camelCase), oldest first. The caller has checked the reader may read it."""
    # The hash lives as long as its newest draft: an older turn's entry (its node died before
    # the turn's end dropped it) is skipped by its age, and forgotten here.
    since = time.time() - DRAFT_TTL_SECONDS
    key = _key(conversation_id)
    rows = {work: json.loads(raw) for work, raw in client().hgetall(key).items()}
    stale = [work for work, row in rows.items() if row["at"] <= since]
    if stale:
        client().hdel(key, *stale)
    kept = sorted((row for row in rows.values() if row["at"] > since), key=lambda r: r["at"])
    return [row["event"] for row in kept]
