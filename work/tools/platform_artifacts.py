"""The platform tools for artifacts and result cards: publish, update, post a card. Each calls
the action the REST endpoint and the socket frame of the same name call (artifacts/actions.py).

The card tool's schema and description are built from the curated card library, so the model
sees every template, what it is for and which item elements it shows.
"""

from artifacts import actions, cards
from artifacts.access import access_artifact
from artifacts.card_library import SEED_TEMPLATES
from artifacts.exceptions import ArtifactNotFound
from artifacts.models import Artifact
from conversations.actions import MAX_BODY
from work.models import Risk
from work.tools.platform import in_conversation
from work.tools.registry import ToolContext, tool

# Content is limited in bytes by the action (MAX_CONTENT_BYTES); no more characters than that.
CONTENT = {"type": "string", "minLength": 1, "maxLength": actions.MAX_CONTENT_BYTES}
NOTE = {
    "type": "string",
    "maxLength": actions.MAX_NOTE,
    "description": "What this version changes, in a line.",
}


@tool(
    "artifact_publish",
    description=(
        "Publish a document, web page, program or data set as an artifact of this "
        "conversation: it gets a page of its own with every later version kept, and the "
        "conversation shows a compact line linking to it. Use it for anything longer than a "
        "chat message or meant to be revised (a plan, a report, code). Returns its id (for "
        "artifact_update) and version 1."
    ),
    risk=Risk.WRITE,
    input_schema={
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": actions.MAX_TITLE},
            "kind": {
                "type": "string",
                "enum": Artifact.Kind.values,
                "description": "markdown (documents), html (a page), code, or json (data).",
            },
            "content": CONTENT,
            "language": {
                "type": "string",
                "maxLength": 40,
                "pattern": actions.LANGUAGE_RE.pattern,
                "description": "For code: the programming language, e.g. python.",
            },
        },
        "required": ["title", "kind", "content"],
        "additionalProperties": False,
    },
)
def artifact_publish(context: ToolContext, arguments: dict):
    artifact = actions.publish_artifact(
        context.agent,
        in_conversation(context),
        arguments["title"],
        arguments["kind"],
        arguments["content"],
        language=arguments.get("language", ""),
    )
    return {
        "artifact_id": str(artifact.id),
        "version": artifact.current_version,
        "message_id": str(artifact.message_id),
        "ref": actions.artifact_ref(artifact),
    }


@tool(
    "artifact_update",
    description=(
        "Store new content as the next version of an artifact of this workspace (by its id); "
        "earlier versions stay as they were. Send the whole new content, not a diff."
    ),
    risk=Risk.WRITE,
    input_schema={
        "type": "object",
        "properties": {
            "artifact_id": {"type": "string", "minLength": 1, "maxLength": 64},
            "content": CONTENT,
            "note": NOTE,
        },
        "required": ["artifact_id", "content"],
        "additionalProperties": False,
    },
)
def artifact_update(context: ToolContext, arguments: dict):
    artifact = access_artifact(context.agent, arguments["artifact_id"])
    if artifact.conversation.workspace_id != context.workspace.id:
        # Its permission was checked for this workspace: another's artifact is not reachable.
        raise ArtifactNotFound()
    version = actions.update_artifact(
        context.agent, artifact, arguments["content"], arguments.get("note", "")
    )
    return {
        "artifact_id": str(artifact.id),
        "version": version.number,
        "ref": actions.artifact_ref(artifact, version.number),
    }


def shown_elements(layout: dict) -> list[str]:
    """The item elements a template's layout shows, in the order they render."""
    shown = []
    for slot in cards.LAYOUT_SLOTS:
        if layout.get(slot):
            shown.append(layout[slot])
        if slot == "subtitle":  # badges render right after it
            shown += [b for b in layout.get("badges", []) if b in cards.LAYOUT_BADGES]
    return shown


TEXT = {"type": "string"}
NUMBER = {"type": "number", "minimum": -cards.MAX_NUMBER, "maximum": cards.MAX_NUMBER}
URL = {"type": "string", "maxLength": 2048, "pattern": "^[hH][tT][tT][pP][sS]?://[^\\s]+$"}
# One item of a card, as artifacts.cards.validate_card accepts it.
ITEM = {
    "type": "object",
    "properties": {
        "title": {**TEXT, "minLength": 1, "maxLength": 200},
        "subtitle": {**TEXT, "maxLength": 300},
        "image": {**URL, "description": "An http(s) image URL."},
        "url": {**URL, "description": "Where the item links to."},
        "price": {
            "type": "object",
            "properties": {
                "amount": NUMBER,
                "currency": {**TEXT, "pattern": "^[A-Za-z]{3}$", "description": "ISO, e.g. EUR."},
                "period": {**TEXT, "minLength": 1, "maxLength": 20, "description": "e.g. night"},
            },
            "required": ["amount"],
            "additionalProperties": False,
        },
        "rating": {"type": "number", "minimum": 0, "maximum": 5},
        "fields": {
            "type": "array",
            "maxItems": 20,
            "description": "Label and value rows.",
            "items": {
                "type": "object",
                "properties": {
                    "label": {**TEXT, "minLength": 1, "maxLength": 60},
                    "value": {"type": ["string", "number"], "maxLength": 500},
                },
                "required": ["label", "value"],
                "additionalProperties": False,
            },
        },
        "chips": {
            "type": "array",
            "maxItems": 20,
            "items": {**TEXT, "minLength": 1, "maxLength": 40},
        },
        "callouts": {
            "type": "array",
            "maxItems": 5,
            "items": {
                "type": "object",
                "properties": {
                    "tone": {"type": "string", "enum": list(cards.TONES)},
                    "text": {**TEXT, "minLength": 1, "maxLength": 500},
                },
                "required": ["text"],
                "additionalProperties": False,
            },
        },
        "text": {**TEXT, "maxLength": 4000, "description": "Body text (markdown)."},
        "change": {
            "type": "object",
            "properties": {"value": NUMBER, "percent": NUMBER},
            "minProperties": 1,
            "additionalProperties": False,
        },
        "trend": {"type": "array", "minItems": 1, "maxItems": cards.MAX_TREND, "items": NUMBER},
        "actions": {
            "type": "array",
            "maxItems": cards.MAX_ACTIONS,
            "description": "Buttons; a press comes back to you as a message.",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "pattern": cards.SLUG_RE.pattern},
                    "label": {**TEXT, "minLength": 1, "maxLength": 40},
                    "style": {"type": "string", "enum": list(cards.ACTION_STYLES)},
                    "once": {"type": "boolean"},
                },
                "required": ["id", "label"],
                "additionalProperties": False,
            },
        },
        "data": {"type": "object", "description": "Your own data for the item, not shown."},
    },
    "required": ["title"],
    "additionalProperties": False,
}
TEMPLATES = {t["name"]: t for t in SEED_TEMPLATES}
TEMPLATE_LINES = "\n".join(
    f"- {t['name']}: {t['description']} Shows: {', '.join(shown_elements(t['layout']))}."
    for t in SEED_TEMPLATES
)


@tool(
    "card_post",
    description=(
        "Post structured results (hotels, flights, quotes, news, …) as a rich card in this "
        "conversation, in one of the curated templates below; people see it laid out, with "
        "buttons. Pick the template that fits, and give each item the elements it shows (others "
        "are kept but hidden). Templates:\n" + TEMPLATE_LINES
    ),
    risk=Risk.WRITE,
    input_schema={
        "type": "object",
        "properties": {
            "template": {"type": "string", "enum": list(TEMPLATES)},
            "title": {**TEXT, "maxLength": 200, "description": "The card's heading."},
            "items": {"type": "array", "minItems": 1, "maxItems": cards.MAX_ITEMS, "items": ITEM},
            "body": {
                **TEXT,
                "maxLength": MAX_BODY,
                "description": "A message shown with the card.",
            },
        },
        "required": ["template", "items"],
        "additionalProperties": False,
    },
)
def card_post(context: ToolContext, arguments: dict):
    template = TEMPLATES[arguments["template"]]
    card = {
        "type": template["result_type"],
        "template": template["name"],
        "items": arguments["items"],
    }
    if arguments.get("title"):
        card["title"] = arguments["title"]
    message = actions.post_card(
        context.agent, in_conversation(context), card, arguments.get("body", "")
    )
    return {"message_id": str(message.id), "template": template["name"]}
