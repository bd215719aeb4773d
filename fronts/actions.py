"""The fronts' state changes: an API session's conversation, and a turn posted in it. Both go
through the conversations' actions (``create_conversation``, ``post_message``): the front is
one more way in to the one pipeline."""

import hashlib

from django.db import connection, transaction

from agents.access import agent_appears_in
from agents.models import Agent
from agntchat.core import presence
from agntchat.core.exceptions import AppError
from conversations import actions as conversation_actions
from conversations import turns
from conversations.access import access_conversation
from conversations.exceptions import ConversationNotFound
from conversations.models import Conversation, Message
from fronts.models import ApiSession
from fronts.targets import home_workspace
from workspaces.models import ApiToken


class NowhereToTalk(Exception):
    """The agent appears in none of the person's workspaces: there is no conversation to open."""


class DelegationRefused(Exception):
    """The text would hand work over as a task (``/task …``, ``@agent please …``), which the
    front cannot answer as a completion."""


def why_not_taken(agent_id) -> str:
    """Why no bridge of AGENT_ID took a front's work within FRONT_START_SECONDS, as far as
    presence tells: not connected, or connected but busy with other work (its lanes full)."""
    if presence.is_online(agent_id):
        return "its bridge is connected but busy with other work"
    return "its bridge is not connected"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _session_title(agent: Agent, token: ApiToken, key: str) -> str:
    title = f"{agent.name} · API"
    if token.name:
        title += f" ({token.name})"
    if key:
        title += f" · {key}"
    return title[:200]


def open_api_session(person, token_id, agent: Agent, key: str) -> ApiSession:
    """The session of this token, agent and key, found or else opened with its own conversation
    (kind ``api``, the person and the agent) in the agent's home workspace for the person. A
    session whose conversation the person can no longer read, or where the agent no longer
    appears, moves to a new conversation (the old one keeps its history)."""
    with transaction.atomic():
        # Two first requests at once: the second waits here and finds the first's session.
        lock = f"api-session:{token_id}:{agent.id}:{key}"
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [lock])
        session = ApiSession.objects.filter(token_id=token_id, agent=agent, key=key).first()
        if session is not None and _usable(person, agent, session.conversation_id):
            return session
        workspace = home_workspace(person, agent)
        if workspace is None:
            raise NowhereToTalk()
        token = ApiToken.objects.get(pk=token_id)
        conversation = conversation_actions.create_conversation(
            person,
            workspace,
            kind=Conversation.Kind.API,
            title=_session_title(agent, token, key),
            agent_ids=[agent.id],
        )
        if session is None:
            return ApiSession.objects.create(
                token_id=token_id, agent=agent, key=key, conversation=conversation
            )
        session.conversation = conversation
        session.system_digest = session.last_request_digest = ""
        session.last_post = None
        session.save()
        return session


def _usable(person, agent: Agent, conversation_id) -> bool:
    try:
        conversation = access_conversation(person, conversation_id)
    except ConversationNotFound:
        return False
    return agent_appears_in(agent, conversation.workspace_id)


def take_api_turn(person, token_id, agent: Agent, key: str, text: str, **options) -> Message:
    """The session's conversation found or opened, and the person's TEXT posted there
    (``post_api_turn``), in one transaction: a refused post leaves no new session behind."""
    with transaction.atomic():
        session = open_api_session(person, token_id, agent, key)
        return post_api_turn(person, session, text, **options)[0]


def post_api_turn(
    person,
    session: ApiSession,
    text: str,
    *,
    system: str = "",
    request_digest: str = "",
    retried: bool = False,
    idempotency_key: str = "",
) -> tuple[Message, bool]:
    """Post the person's TEXT in the session's conversation through the pipeline, which wakes
    the agent; return the post and whether it is new. SYSTEM (the client's system text) goes
    first in the post when it differs from the last one the session put there. A request the
    client library RETRIED with the same messages as the last one (REQUEST_DIGEST), or the same
    IDEMPOTENCY_KEY as an earlier one, gets the earlier post back, not a second one. Refused
    (nothing written): a text that would delegate a task (DelegationRefused)."""
    conversation = access_conversation(person, session.conversation_id)
    if retried and request_digest and request_digest == session.last_request_digest:
        if session.last_post_id is not None:
            return session.last_post, False
    system_digest = digest(system) if system else session.system_digest
    body = text
    if system and system_digest != session.system_digest:
        quoted = "\n".join(f"> {line}" if line else ">" for line in system.splitlines())
        body = f"System instructions from the API client:\n{quoted}\n\n{text}"
        if len(body) > conversation_actions.MAX_BODY >= len(text):
            raise AppError(
                f"The system and developer messages ({len(system):,} characters) and the last "
                f"user message do not fit the {conversation_actions.MAX_BODY:,} characters a "
                "message holds: shorten the system text.",
                code="context_length_exceeded",
                fields={"messages": "System text too long."},
            )
    if turns.delegation(body, conversation, person) is not None:
        raise DelegationRefused()
    ref = f"api:{digest(idempotency_key)[:40]}" if idempotency_key else ""
    with transaction.atomic():
        post = conversation_actions.post_message(person, conversation, body, client_ref=ref)
        ApiSession.objects.filter(pk=session.pk).update(
            system_digest=system_digest, last_request_digest=request_digest, last_post=post
        )
    return post, True
