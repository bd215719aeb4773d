"""Messages as the page shows them: the API's message shape plus safe HTML to place in the page.

The same rows serve the first render of a conversation and every fragment fetched afterwards
(history, live arrivals, updates), so a message looks the same however it reached the screen.
"""

import hashlib

from django.db.models import Q
from django.utils.safestring import mark_safe

from agntchat.ui.shell import is_scripted
from agntchat.ui.tool_calls import tool_calls_by_message
from artifacts.rendering import render_markdown
from conversations.access import messages_visible_to
from conversations.actions import REACTIONS
from conversations.models import Message, Participant
from conversations.payloads import message_data, with_thread_cards

HUES = 8
# Who a message without an author is shown as: a notice is the system's; anything else was
# written by an agent or a person deleted since.
SYSTEM = {"type": "system", "id": "system", "name": "agntchat"}
GONE = {"type": "system", "id": "deleted", "name": "Deleted author"}


def hue(key) -> int:
    """A stable colour slot for an author, so the same person always looks the same."""
    return hashlib.sha1(str(key).encode()).digest()[0] % HUES


def initials(name: str) -> str:
    parts = [p for p in (name or "?").replace("-", " ").replace("_", " ").split() if p]
    letters = "".join(p[0] for p in parts[:2]) if len(parts) > 1 else (name or "?")[:2]
    return letters.upper()


def visible_messages(viewer):
    """Messages of every conversation VIEWER may read, ready for rendering."""
    return messages_visible_to(viewer).select_related("author_user", "author_agent", "conversation")


def message_rows(messages, viewer) -> list[dict]:
    """Rows for templates/conversations/_message.html, oldest first as given."""
    messages = with_thread_cards(list(messages))
    thread_ids = [t.id for m in messages for t in m.threads.all()]
    # A thread opens inline for the people in it and for the owner of an agent in it.
    taking_part = set(
        Participant.objects.filter(conversation_id__in=thread_ids)
        .filter(Q(user=viewer) | Q(agent__owner=viewer))
        .values_list("conversation_id", flat=True)
    )
    calls = tool_calls_by_message(messages, viewer)
    rows = []
    for message in messages:
        row = message_data(message)
        author = row["author"] or (SYSTEM if message.kind == Message.Kind.NOTICE else GONE)
        row["author"] = author
        # render_markdown sanitises (nh3): raw HTML in a body is shown as text, links are safe.
        row["body_html"] = mark_safe(render_markdown(message.body)) if message.body else ""
        # Built with format_html from the sealed layout: every string in it is escaped.
        row["card_html"] = mark_safe(row.get("card_html") or "")
        row["scripted"] = is_scripted(message.author_agent)
        row["mine"] = message.author_user_id == viewer.id
        external = (message.payload or {}).get("external_author")
        if isinstance(external, dict) and external.get("name"):
            # From an outside chat (Telegram): shown as its writer, stored on behalf of the
            # person who linked the chat (docs/telegram.md).
            author = row["author"] = {
                "type": "person",
                "id": f"{external.get('channel')}:{external.get('id')}",
                "name": external["name"],
            }
            row["via"] = str(external.get("channel", "")).title()
            row["mine"] = False
        row["workspace_id"] = message.conversation.workspace_id
        row["hue"] = hue(author["id"])
        row["initials"] = initials(author["name"])
        row["tool_calls"] = calls.get(message.id, [])
        for call in row["tool_calls"]:
            # Under the agent's own reply it goes without saying who used the tool.
            call["by_another"] = call["agent_id"] != message.author_agent_id
        for card in row["threads"]:
            card["can_open"] = card["id"] in taking_part
        # Reactions and the message's own actions (issue 28).
        for reaction in row["reactions"]:
            reaction["mine"] = any(p["id"] == str(viewer.id) for p in reaction["people"])
            reaction["names"] = ", ".join(p["name"] for p in reaction["people"])
        row["reaction_choices"] = REACTIONS
        row["in_thread"] = message.conversation.kind == "thread"
        rows.append(row)
    return rows


def slash_commands(agents) -> list[dict]:
    """The composer's "/" popup: the commands understood at the start of a message (``/task``,
    conversations.turns.DELEGATION; ``/search`` and
    ``/remind``, which the page itself turns into a search or a reminder), and
    a ready ``/task @agent`` for each agent taking part here."""
    commands = [
        {
            "command": "/task",
            "insert": "/task ",
            "description": "Hand a job to an agent as a task (the best-suited one)",
        },
        {
            "command": "/remind",
            "insert": "/remind @",
            "description": (
                "Have one of your agents remind you: /remind @agent in 30 minutes, at 15:30, "
                "tomorrow at 9 …"
            ),
        },
        {
            "command": "/search",
            "insert": "/search ",
            "description": "Search messages, artifacts and tasks in this workspace",
        },
    ]
    commands += [
        {
            "command": f"/task @{agent.handle}",
            "insert": f"/task @{agent.handle} ",
            "description": f"Give {agent.name} a task",
        }
        for agent in agents
    ]
    return commands
