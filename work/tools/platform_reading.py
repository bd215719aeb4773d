"""The platform tools that read: a conversation's older history, and full-text search over
what the agent can see in its workspace. Every row comes from the visibility-checked querysets
of the apps' access modules: an agent reads only conversations it takes part in."""

from django.contrib.postgres.search import SearchHeadline
from django.db.models import F, Q

from agntchat.core import search
from artifacts.access import artifacts_visible_to
from artifacts.models import ArtifactVersion
from conversations import files
from conversations.access import access_attachment, access_message, messages_visible_to
from conversations.exceptions import MessageNotFound
from conversations.models import Message
from work.directives import HISTORY_TURNS
from work.models import Risk
from work.tools.platform import in_conversation, own_tasks
from work.tools.registry import ToolContext, tool

MAX_HISTORY = 50
MAX_RESULTS = 20
# Excerpts with the matched words in bold, as markdown.
HEADLINE = {
    "config": search.CONFIG, "max_words": 30, "min_words": 10, "start_sel": "**", "stop_sel": "**"
}  # fmt: skip


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


def _matches(queryset, vector, query, limit, *fields):
    """QUERYSET's rows matching QUERY, best first, with their rank and a headline of FIELDS."""
    return list(
        search.matching(queryset, vector, query)
        .annotate(headline=SearchHeadline(*fields, query, **HEADLINE))
        .order_by("-rank", "-created_at")[:limit]
    )


def search_messages(context: ToolContext, query, limit) -> list[dict]:
    visible = messages_visible_to(context.agent).filter(conversation__workspace=context.workspace)
    rows = _matches(
        visible.select_related("conversation", "author_user", "author_agent"),
        search.vector("body"),
        query,
        limit,
        "body",
    )
    return [
        {
            "kind": "message",
            "id": str(m.id),
            "conversation_id": str(m.conversation_id),
            "conversation": m.conversation.title,
            "author": author_name(m),
            "text": m.headline,
            "time": m.created_at.isoformat(),
            "rank": m.rank,
        }
        for m in rows
    ]


def search_artifacts(context: ToolContext, query, limit) -> list[dict]:
    visible = artifacts_visible_to(context.agent).filter(conversation__workspace=context.workspace)
    # The current version of each: what the artifact says now.
    versions = ArtifactVersion.objects.filter(
        artifact__in=visible, number=F("artifact__current_version")
    ).select_related("artifact")
    vector = search.vector(artifact__title="A", content="B")
    rows = _matches(versions, vector, query, limit, "content")
    return [
        {
            "kind": "artifact",
            "id": str(v.artifact_id),
            "conversation_id": str(v.artifact.conversation_id),
            "title": v.artifact.title,
            "version": v.number,
            "text": v.headline,
            "time": v.created_at.isoformat(),
            "rank": v.rank,
        }
        for v in rows
    ]


def search_tasks(context: ToolContext, query, limit) -> list[dict]:
    visible = own_tasks(context.agent).filter(workspace=context.workspace)
    rows = _matches(
        visible.select_related("agent"),
        search.vector("instructions"),
        query,
        limit,
        "instructions",
    )
    return [
        {
            "kind": "task",
            "id": str(t.id),
            "agent": t.agent.handle,
            "status": t.status,
            "text": t.headline,
            "time": t.created_at.isoformat(),
            "rank": t.rank,
        }
        for t in rows
    ]


SEARCHES = {"message": search_messages, "artifact": search_artifacts, "task": search_tasks}


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
                "items": {"type": "string", "enum": list(SEARCHES)},
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
    query = search.web_query(arguments["query"])
    limit = arguments.get("limit", 10)
    found = []
    for kind in arguments.get("kinds", list(SEARCHES)):
        found += SEARCHES[kind](context, query, limit)
    found.sort(key=lambda r: r["rank"], reverse=True)
    results = found[:limit]
    for result in results:
        result["rank"] = round(result["rank"], 4)
    return {"results": results}


# What file_read gives of a text file; past it, the text is cut and says so.
MAX_FILE_TEXT = 50_000
TEXT_TYPES = ("text/", "application/json")


@tool(
    "file_read",
    description=(
        "Read a file attached to a message you can see, by its id (listed with the message as "
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
