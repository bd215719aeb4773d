"""The platform tools that read: a conversation's older history, and full-text search over
what the agent can see in its workspace (work/search.py, the search people use too). Every row
comes from the visibility-checked querysets of the apps' access modules: an agent reads only
conversations it takes part in."""

from django.db.models import Q

from conversations import files
from conversations.access import access_attachment, access_message, messages_visible_to
from conversations.exceptions import AttachmentNotFound, MessageNotFound
from conversations.models import Message
from work import search
from work.directives import HISTORY_TURNS
from work.models import Risk
from work.tools.platform import in_conversation
from work.tools.registry import ToolContext, tool

MAX_HISTORY = 50
MAX_RESULTS = 20


def author_name(message: Message) -> str:
    if message.author_agent_id:
        return message.author_agent.name
    if message.author_user_id:
        return message.author_user.label
    return "system"


@tool(
    "conversation_history",
    description=(
        "Read older messages of this conversation than the recent ones you were given: by "
        "default those just before your window of the last 20; or those before a message id "
        "(before); or skipping the newest OFFSET. Oldest first, at most 50 at a time, each "
        "with its id, author, text and time; page back with the oldest id as the next before."
    ),
    risk=Risk.READ,
    input_schema={
        "type": "object",
        "properties": {
            "before": {
                "type": "string",
                "minLength": 1,
                "maxLength": 64,
                "description": "A message id: only messages older than it.",
            },
            "offset": {
                "type": "integer",
                "minimum": 0,
                "maximum": 100_000,
                "description": "Skip this many of the newest messages (default 20: your window).",
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_HISTORY},
        },
        "additionalProperties": False,
    },
)
def conversation_history(context: ToolContext, arguments: dict):
    conversation = in_conversation(context)
    # The messages the directives' window is made of: text, not held back by the loop guard.
    found = messages_visible_to(context.agent).filter(
        conversation=conversation, kind=Message.Kind.TEXT
    )
    if "before" in arguments:
        before = access_message(context.agent, arguments["before"])
        if before.conversation_id != conversation.id:
            raise MessageNotFound("No message with this id in this conversation.")
        found = found.filter(
            Q(created_at__lt=before.created_at) | Q(created_at=before.created_at, id__lt=before.id)
        )
        offset = arguments.get("offset", 0)
    else:
        offset = arguments.get("offset", HISTORY_TURNS)
    limit = arguments.get("limit", 20)
    rows = list(
        found.select_related("author_user", "author_agent").order_by("-created_at", "-id")[
            offset : offset + limit
        ]
    )
    messages = [
        {
            "id": str(m.id),
            "author": author_name(m),
            "text": m.body,
            "time": m.created_at.isoformat(),
        }
        for m in reversed(rows)
    ]
    return {"messages": messages, "more": len(rows) == limit}


def _tool_result(hit: search.Hit) -> dict:
    """A hit as the agent reads it: its excerpt with the matched words in bold (markdown)."""
    row = {"kind": hit.kind, "id": str(hit.id)}
    if hit.kind != "task":
        row["conversation_id"] = str(hit.conversation.id)
    if hit.kind == "message":
        row["conversation"] = hit.conversation.title
        row["author"] = hit.author.label if hit.author is not None else "system"
    elif hit.kind == "artifact":
        row |= {"title": hit.title, "version": hit.version}
    else:
        row |= {"agent": hit.task_agent.handle, "status": hit.status}
    row |= {
        "text": hit.marked("**", "**"),
        "time": hit.time.isoformat(),
        "rank": round(hit.rank, 4),
    }
    return row


@tool(
    "workspace_search",
    description=(
        "Search this workspace's messages, artifacts and tasks that you can see, by words "
        '(full text: all words must match; "quoted phrases", OR and -word work as in a web '
        "search). Best matches first, at most 20, each with its kind, id and a highlighted "
        "excerpt; read a message's neighbours with conversation_history."
    ),
    risk=Risk.READ,
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 200},
            "kinds": {
                "type": "array",
                "items": {"type": "string", "enum": list(search.KINDS)},
                "minItems": 1,
                "uniqueItems": True,
                "description": "Only these kinds (default: all).",
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)
def workspace_search(context: ToolContext, arguments: dict):
    filters = search.Filters(
        kinds=tuple(arguments.get("kinds", search.KINDS)), workspace_id=context.workspace.id
    )
    hits, _ = search.search(
        context.agent, arguments["query"], filters, limit=arguments.get("limit", 10)
    )
    return {"results": [_tool_result(hit) for hit in hits]}


# What file_read gives of a text file; past it, the text is cut and says so.
MAX_FILE_TEXT = 50_000
TEXT_TYPES = ("text/", "application/json")


@tool(
    "file_read",
    description=(
        "Read a file attached to a message you can see in this workspace, by its id (listed with the message as "
        "“Attached”). Text files (txt, md, csv, json) come back as text, the first 50,000 "
        "characters; for other files (pictures, PDF, zip) you get what they are and a link."
    ),
    risk=Risk.READ,
    input_schema={
        "type": "object",
        "properties": {"file_id": {"type": "string", "format": "uuid"}},
        "required": ["file_id"],
        "additionalProperties": False,
    },
)
def file_read(context: ToolContext, arguments: dict):
    found = access_attachment(context.agent, arguments["file_id"])
    if found.conversation.workspace_id != context.workspace.id:
        # What the call gives is kept with this workspace's work, for its people to read: an
        # agent in two workspaces never carries one's files into the other.
        raise AttachmentNotFound()
    about = files.attachment_data(files.ref_data(found))
    described = {
        "id": about["id"],
        "name": about["name"],
        "content_type": about["content_type"],
        "size": about["size"],
        "url": about["url"],
    }
    if not found.content_type.startswith(TEXT_TYPES):
        return described | {"note": "Not a text file: only what it is is given here."}
    with found.file.open("rb") as stored:
        raw = stored.read(MAX_FILE_TEXT * 4 + 4)
    text = raw.decode("utf-8", errors="replace")
    if len(text) > MAX_FILE_TEXT or found.size > len(raw):
        return described | {"text": text[:MAX_FILE_TEXT], "truncated": True}
    return described | {"text": text}
