"""What an agent should do in a turn, computed on the server (RUN-3…5).

The payload is split in two. The *stable* block (identity, house rules, personality, tool and
skill index) is byte-for-byte identical from turn to turn while none of its inputs change, so a
provider's prompt cache keeps hitting. The *volatile* block (who speaks next, the rulebook,
recent history, the triggering message) is rebuilt every turn and sent outside the cached block.
"""

import hashlib

from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import Func, JSONField, OuterRef
from django.db.models.functions import JSONObject

from agents.access import credentials_granted_to
from agents.models import Agent
from agntchat.core.crypto import decrypt
from conversations import relays
from conversations.models import Message
from conversations.threads import wording
from work import memory, skills
from work.tools.registry import agent_tools, definitions

HISTORY_TURNS = 20
# Only what a history entry shows (key: column): no model instances, no timestamps to parse.
HISTORY_FIELDS = {
    "id": "id",
    "author_agent_id": "author_agent_id",
    "agent_name": "author_agent__name",
    "display_name": "author_user__display_name",
    "username": "author_user__username",
    "body": "body",
}

HOUSE_RULES = """\
- You are a participant in a team chat shared by people and AI agents. Reply as yourself.
- Answer the message you were given; keep to the conversation's rulebook when it has one.
- If you have nothing useful to add, say so briefly rather than repeating others.
- Never reveal credentials or another workspace's data."""

RULEBOOK_FIELDS = {
    "reply_style": "Reply style",
    "reply_length": "Reply length",
    "when_not_to_chime_in": "When not to chime in",
}


TOOLS_INTRO = (
    "You act through these tools (call them; they act in the conversation or task you were "
    "given, as yourself). Writing that you did something does not do it."
)


def stable_block(agent: Agent, tools=(), skill_index=()) -> str:
    """The cached part. Only its inputs may change it: no clocks, ids of turns or counters.
    TOOLS: the agent's tools (registry ``Tool``s); SKILL_INDEX: its active skills' names and
    one-line summaries (work/skills.py)."""
    parts = [
        f"# Who you are\nName: {agent.name} (@{agent.handle})",
        f"Role: {agent.role or 'general assistant'}",
    ]
    if agent.capabilities:
        parts.append("Capabilities: " + ", ".join(sorted(agent.capabilities)))
    parts.append("# House rules\n" + HOUSE_RULES)
    if agent.personality.strip():
        parts.append("# Your personality\n" + agent.personality.strip())
    if tools:
        parts.append(
            f"# Tools\n{TOOLS_INTRO}\n"
            + "\n".join(f"- {t.name}: {t.summary}" for t in sorted(tools, key=lambda t: t.name))
        )
    if skill_index:
        parts.append(
            "# Skills (read one's full text with skill_load before doing what it covers)\n"
            + "\n".join(
                f"- {s['name']}: {s['summary']}"
                for s in sorted(skill_index, key=lambda s: s["name"])
            )
        )
    return "\n\n".join(parts) + "\n"


def stable_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def rulebook_text(rulebook: dict) -> str:
    lines = [
        f"- {label}: {rulebook[key]}" for key, label in RULEBOOK_FIELDS.items() if rulebook.get(key)
    ]
    return "\n".join(lines)


def history_entries(rows, agent: Agent) -> list[dict]:
    """Recent messages as the backends take them: role, author, text. ROWS are HISTORY_FIELDS
    objects (ids as text)."""
    me = str(agent.id)
    return [
        {
            "role": "assistant" if row["author_agent_id"] == me else "user",
            "author": row["agent_name"] or row["display_name"] or row["username"] or "system",
            "text": row["body"],
        }
        for row in rows
    ]


def attached(message) -> str:
    """The files of MESSAGE, one line each, for the model to read with ``file_read``."""
    refs = (message.payload or {}).get("attachments") or ()
    lines = [f"- {r['name']} ({r['content_type']}, {r['size']} bytes), id {r['id']}" for r in refs]
    return "\n\nAttached (read with file_read):\n" + "\n".join(lines) if lines else ""


def volatile_block(
    *, speaker: Agent, rulebook: dict, trigger_author: str, trigger_text: str, extra: str = ""
) -> str:
    parts = [f"# This turn\nIt is your turn to answer ({speaker.name})."]
    if rulebook_text(rulebook):
        parts.append("# Conversation rulebook\n" + rulebook_text(rulebook))
    if extra:
        parts.append(extra)
    parts.append(f"# Message to answer\nFrom {trigger_author}:\n{trigger_text}")
    return "\n\n".join(parts) + "\n"


# API backends take their key from the bridge's environment, or from the workspace credential
# of this name, decrypted here and handed to the agent's session with the work item.
CREDENTIAL_FOR_BACKEND = {"anthropic_api": "anthropic_api_key", "openai_api": "openai_api_key"}


def workspace_api_key(agent: Agent, workspace_id) -> str | None:
    """The workspace's key for AGENT's backend, only if a manager granted it to this agent and its
    owner manages the workspace (agents.access.credentials_granted_to)."""
    name = CREDENTIAL_FOR_BACKEND.get(agent.backend)
    if name is None:
        return None
    credential = credentials_granted_to(agent, workspace_id).filter(name=name).first()
    return decrypt(credential.ciphertext) if credential else None


def history_window(conversation: str) -> Func:
    """The newest text messages of the conversation whose id is the outer query's column
    CONVERSATION, newest first, as HISTORY_FIELDS objects: enough for a message's history
    without itself. An annotation, so that it is read with the message (a claim reads it in the
    same statement as the work it takes)."""
    # One JSON array (one value to decode), not an array of JSON objects (one each).
    return Func(
        ArraySubquery(
            Message.objects.filter(
                conversation_id=OuterRef(conversation),
                kind=Message.Kind.TEXT,
                held_at__isnull=True,
                deleted_at__isnull=True,  # a deleted message is gone from agents' context too
            )
            # The order of the message_history index, walked backwards in this conversation.
            .order_by("-created_at", "-id")
            .values(entry=JSONObject(**HISTORY_FIELDS))[: HISTORY_TURNS + 1]
        ),
        function="to_jsonb",
        output_field=JSONField(),
    )


def tools_and_skills(agent: Agent) -> tuple[list, list[dict]]:
    """The agent's tools and its active skills' index; ``skill_load`` only when there is a
    skill to load (a tool the model could never use well is noise in every prompt)."""
    index = skills.agent_index(agent)
    tools = [t for t in agent_tools(agent) if index or t.name != "skill_load"]
    return tools, index


def reply_thread_context(thread) -> str:
    """What a reply thread hangs off (people's "Reply in thread"): the message it answers, which
    its own history does not hold. One read, only for a thread's messages."""
    origin = Message.objects.select_related("author_user", "author_agent").get(
        pk=thread.parent_message_id
    )
    author = origin.author.label if origin.author else "system"
    text = "(deleted)" if origin.deleted_at else origin.body
    return f"# Thread\nThis is a reply thread under {author}'s message:\n{text}"


def for_messages(agent: Agent, messages) -> dict:
    """Directives for answering each of MESSAGES (loaded with their conversation, turn and
    ``history_window``), by message id. Shared reads are done once for the batch."""
    tools, index = tools_and_skills(agent)
    stable = stable_block(agent, tools, index)
    stable_digest = stable_hash(stable)
    tool_definitions = definitions(tools)
    api_keys = {}
    memory_batch: dict = {}
    out = {}
    for message in messages:
        conversation = message.conversation
        # Recent history around the message, including answers given since (earlier turns).
        mine = str(message.pk)
        recent = [m for m in message.history_window if m["id"] != mine][:HISTORY_TURNS][::-1]
        rulebook = conversation.settings.get("rulebook", {})
        author = relays.outside_author(message) or (
            message.author.label if message.author else "system"
        )
        extra = []
        turn = getattr(message, "turn", None)
        if turn is not None:
            mine = next((e for e in turn.queue if e["agent_id"] == str(agent.id)), None)
            after = [e["name"] for e in turn.queue[turn.position + 1 :]]
            if mine:
                extra.append(
                    f"# Turn\nYou hold the turn ({mine['reason']})."
                    + (f" Next: {', '.join(after)}." if after else "")
                )
        if conversation.is_reply_thread and conversation.parent_message_id:
            extra.append(reply_thread_context(conversation))  # issue 28
        side_threads = wording(conversation)
        if side_threads:
            extra.append("# Side threads\n" + side_threads)
        remembered, context = memory.turn_context(
            agent, conversation, conversation.workspace_id, message.body, memory_batch
        )
        if remembered:
            extra.append(remembered)
        if conversation.workspace_id not in api_keys:
            api_keys[conversation.workspace_id] = workspace_api_key(
                agent, conversation.workspace_id
            )
        out[message.id] = {
            "stable": stable,
            "stable_hash": stable_digest,
            "volatile": volatile_block(
                speaker=agent,
                rulebook=rulebook,
                trigger_author=author,
                trigger_text=message.body + attached(message),
                extra="\n\n".join(extra),
            ),
            "history": history_entries(recent, agent),
            "prompt": message.body + attached(message),
            "rulebook": rulebook,
            "session_key": f"conversation:{conversation.id}",
            "api_key": api_keys[conversation.workspace_id],
            "tools": tool_definitions,
            # What memory the turn was given; "skipped" names sources past the time budget.
            "context": context,
        }
    return out


def for_task(agent: Agent, task) -> dict:
    """Directives for running TASK."""
    tools, index = tools_and_skills(agent)
    stable = stable_block(agent, tools, index)
    rulebook = task.conversation.settings.get("rulebook", {}) if task.conversation_id else {}
    author = task.created_by_user or task.created_by_agent
    remembered, context = memory.turn_context(
        agent, task.conversation, task.workspace_id, task.instructions
    )
    return {
        "stable": stable,
        "stable_hash": stable_hash(stable),
        "volatile": volatile_block(
            speaker=agent,
            rulebook=rulebook,
            trigger_author=author.label if author else "a routine",
            trigger_text=task.instructions,
            extra="\n\n".join(
                p for p in ("# Task\nWork on this task and report a final result.", remembered) if p
            ),
        ),
        "history": [],
        "prompt": task.instructions,
        "rulebook": rulebook,
        "session_key": f"task:{task.id}",
        "api_key": workspace_api_key(agent, task.workspace_id),
        "tools": definitions(tools),
        "context": context,
    }
