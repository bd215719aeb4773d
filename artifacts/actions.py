"""Every state change of artifacts, card templates and card buttons (ART-1…3, CARD-2, CARD-4)."""

import json
import math
import re

from django.db import transaction
from django.db.models import F

from agents.models import Agent
from agntchat.core.events import publish_live
from agntchat.core.validation import UNSTORABLE_TEXT, JSONTooDeep, check_json_text
from artifacts.card_library import SEED_TEMPLATES
from artifacts.cards import CardError, validate_template
from artifacts.cards_store import (
    card_button,
    is_email_action,
    seal_card_payload,
    with_card_html,
)
from artifacts.exceptions import ActionUsed, ArtifactRule, CardActionUnavailable, CardInvalid
from artifacts.html_nesting import MAX_HTML_DEPTH, html_nesting_depth
from artifacts.mailbox import email_of, mailbox
from artifacts.models import Artifact, ArtifactComment, ArtifactVersion, CardTemplate
from artifacts.rendering import render_artifact
from conversations.access import conversations_visible_to
from conversations.actions import count_post, count_stored_bytes, is_archived, post_message
from conversations.exceptions import ConversationArchived
from conversations.live import announce_message, audience_topics
from conversations.models import Conversation, Message
from conversations.payloads import author_data
from conversations.refs import posted_under_ref

MAX_CONTENT_BYTES = 500 * 1024
MAX_TITLE = 200
MAX_NOTE = 500
MAX_COMMENT = 10_000
LANGUAGE_RE = re.compile(r"^[A-Za-z0-9_+#.-]{0,40}$")


def post_card(author, conversation: Conversation, card, body: str = "", client_ref: str = ""):
    """A message carrying CARD: validated and sealed with its layout and HTML here, then posted
    through the one pipeline. A malformed card is refused naming the field; nothing is stored."""
    payload = seal_card_payload({"card": card})
    return post_message(author, conversation, body, payload=payload, client_ref=client_ref)


def _is_agent(actor) -> bool:
    return isinstance(actor, Agent)


def _authors(actor) -> dict:
    """The author columns for ACTOR, a person or an agent."""
    return {
        "author_user": None if _is_agent(actor) else actor,
        "author_agent": actor if _is_agent(actor) else None,
    }


def artifact_ref(artifact: Artifact, version: int | None = None) -> dict:
    """The compact reference a message carries instead of the content."""
    return {
        "id": str(artifact.id),
        "title": artifact.title,
        "kind": artifact.kind,
        "version": version or artifact.current_version,
    }


def _check_content(content, kind: str) -> str:
    if not isinstance(content, str) or not content.strip():
        raise ArtifactRule(
            "An artifact needs content.", fields={"content": "This field may not be blank."}
        )
    if len(content.encode()) > MAX_CONTENT_BYTES:
        raise ArtifactRule(
            f"Artifact content can be at most {MAX_CONTENT_BYTES // 1024} KB.",
            fields={"content": "Too large."},
        )
    if kind == Artifact.Kind.JSON:
        try:
            check_json_text(content, max_bytes=MAX_CONTENT_BYTES)
        except JSONTooDeep as exc:
            raise ArtifactRule(exc.message, fields={"content": "Nested too deeply."}) from None
        if problem := _json_problem(content):
            raise ArtifactRule(
                f"A json artifact holds JSON data. {problem}", fields={"content": problem}
            )
    # The sanitiser's time grows with tags times depth: measured before it ever runs.
    if kind == Artifact.Kind.HTML and html_nesting_depth(content) > MAX_HTML_DEPTH:
        raise ArtifactRule(
            f"An HTML page can nest at most {MAX_HTML_DEPTH} elements deep, counting those left "
            "unclosed. This one nests deeper, or too irregularly to tell.",
            fields={"content": "Nested too deeply."},
        )
    return content


def _json_problem(content: str) -> str | None:
    """Why CONTENT (its depth already checked) is not JSON a `json` artifact can keep, or None.
    The page shows it parsed and pretty-printed, so it must parse and print back faithfully."""
    try:
        value = json.loads(content, parse_constant=_not_json, parse_float=_finite)
    except ValueError as exc:
        return f"Not valid JSON: {exc}."
    # An unpaired surrogate written as an escape (\ud800) is printed as the character itself,
    # which PostgreSQL cannot store; ensure_ascii=False is how the page prints it.
    if UNSTORABLE_TEXT.search(json.dumps(value, ensure_ascii=False)):
        return "Text may not contain unpaired surrogates."
    return None


def _not_json(word: str):
    # Python's parser takes NaN and Infinity; JSON has no such words.
    raise ValueError(f"{word} is not JSON")


def _finite(text: str) -> float:
    # 1e400 is JSON, but as a float it is infinity and would be shown as Infinity.
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is too large a number")
    return number


def _check_note(note) -> str:
    if not isinstance(note, str):
        raise ArtifactRule("A change note must be text.", fields={"note": "Must be a string."})
    if len(note) > MAX_NOTE:
        raise ArtifactRule(
            f"A change note can be at most {MAX_NOTE} characters.", fields={"note": "Too long."}
        )
    return note.strip()


def publish_artifact(
    actor,
    conversation: Conversation,
    title: str,
    kind: str,
    content: str,
    language: str = "",
    *,
    client_ref: str = "",
) -> Artifact:
    """Create an artifact with its version 1 and reference it from a compact message in the
    conversation, in one transaction (ART-1). A repeated CLIENT_REF is the same artifact."""
    if not isinstance(title, str) or not title.strip():
        raise ArtifactRule(
            "An artifact needs a title.", fields={"title": "This field may not be blank."}
        )
    title = title.strip()
    if len(title) > MAX_TITLE:
        raise ArtifactRule(
            f"A title can be at most {MAX_TITLE} characters.", fields={"title": "Too long."}
        )
    if kind not in Artifact.Kind.values:
        raise ArtifactRule(
            "Unknown artifact kind.",
            fields={"kind": f"Must be one of {', '.join(Artifact.Kind.values)}."},
        )
    if not isinstance(language, str) or not LANGUAGE_RE.match(language):
        raise ArtifactRule(
            "Invalid language name.",
            fields={"language": "Up to 40 letters, digits or _ + # . -"},
        )
    content = _check_content(content, kind)
    if client_ref:
        earlier = _published_under_ref(actor, conversation, client_ref)
        if earlier is not None:
            return earlier
    # Refused here, not by post_message after the storage budget was spent on it.
    if is_archived(conversation):
        raise ConversationArchived()
    count_stored_bytes(actor, len(content.encode()), "artifact versions")
    # Rendered (and sanitised) once, here, outside the transaction: reads serve the stored copy.
    rendered = render_artifact(kind, content, language or None)
    try:
        with transaction.atomic():
            artifact = Artifact.objects.create(
                conversation=conversation,
                title=title,
                kind=kind,
                language=language,
                created_by_user=None if _is_agent(actor) else actor,
                created_by_agent=actor if _is_agent(actor) else None,
            )
            ArtifactVersion.objects.create(
                artifact=artifact, number=1, content=content, rendered=rendered, **_authors(actor)
            )
            artifact.message = post_message(
                actor,
                conversation,
                f"📄 published “{title}”",
                payload={"artifact_id": str(artifact.id), "artifact": artifact_ref(artifact)},
                client_ref=client_ref,
            )
            if (artifact.message.payload or {}).get("artifact_id") != str(artifact.id):
                # The same ref was stored meanwhile by a send of this publish made at the same
                # moment (post_message answers with that message): this one's rows go.
                raise _RefTaken()
            artifact.save(update_fields=["message", "updated_at"])
    except _RefTaken:
        return _published_under_ref(actor, conversation, client_ref)
    return artifact


class _RefTaken(Exception):
    pass


def _published_under_ref(actor, conversation, client_ref) -> Artifact | None:
    """The artifact an earlier publish with this ref created (a retried frame)."""
    earlier = posted_under_ref(actor, conversation, client_ref)
    if earlier is None:
        return None
    artifact = Artifact.objects.filter(pk=earlier.payload.get("artifact_id")).first()
    if artifact is None:
        raise ArtifactRule(
            "This ref was already used for another message.", fields={"ref": "Already used."}
        )
    return artifact


def update_artifact(actor, artifact: Artifact, content: str, note: str = "") -> ArtifactVersion:
    """Store CONTENT as the artifact's next version; earlier versions stay as they are (ART-2).
    Holds the artifact's row lock while numbering, so concurrent edits get distinct numbers."""
    # An archived conversation takes nothing new, as for its messages and files.
    if is_archived(artifact.conversation):
        raise ConversationArchived()
    content = _check_content(content, artifact.kind)
    note = _check_note(note)
    # The current version's very content is that version, not a new one: a bridge's retried
    # artifact.update frame (it carries no ref), or a person saving unchanged text.
    unchanged = _current_if_same(artifact.pk, content)
    if unchanged is not None:
        return unchanged
    count_stored_bytes(actor, len(content.encode()), "artifact versions")
    rendered = render_artifact(artifact.kind, content, artifact.language or None)
    with transaction.atomic():
        locked = Artifact.objects.select_for_update().get(pk=artifact.pk)
        unchanged = _current_if_same(artifact.pk, content)  # a retry that raced this one
        if unchanged is not None:
            return unchanged
        locked.current_version += 1
        locked.save(update_fields=["current_version", "updated_at"])
        version = ArtifactVersion.objects.create(
            artifact=locked,
            number=locked.current_version,
            content=content,
            rendered=rendered,
            note=note,
            **_authors(actor),
        )
        artifact.current_version = locked.current_version
        publish_live(
            audience_topics(artifact.conversation),
            "artifact.updated",
            conversation_id=artifact.conversation_id,
            artifact=artifact_ref(artifact),
            author=author_data(version),
            note=note,
        )
    return version


def _current_if_same(artifact_id, content: str) -> ArtifactVersion | None:
    """The artifact's current version if its content is CONTENT."""
    return (
        ArtifactVersion.objects.filter(
            artifact_id=artifact_id, number=F("artifact__current_version"), content=content
        )
        .defer("rendered", "search_vector")
        .first()
    )


def comment_on_artifact(
    actor,
    artifact: Artifact,
    body: str,
    version: ArtifactVersion | None = None,
    parent: ArtifactComment | None = None,
) -> ArtifactComment:
    """Attach a comment to the artifact, optionally to one version and under another comment."""
    body = body.strip() if isinstance(body, str) else ""
    if not body:
        raise ArtifactRule(
            "A comment needs a body.", fields={"body": "This field may not be blank."}
        )
    if len(body) > MAX_COMMENT:
        raise ArtifactRule(
            f"A comment can be at most {MAX_COMMENT} characters.", fields={"body": "Too long."}
        )
    if version is not None and version.artifact_id != artifact.id:
        raise ArtifactRule(
            "That version belongs to another artifact.", fields={"version": "Not of this artifact."}
        )
    if parent is not None and parent.artifact_id != artifact.id:
        raise ArtifactRule(
            "A reply must be on the same artifact.", fields={"parent": "Not of this artifact."}
        )
    if is_archived(artifact.conversation):
        raise ConversationArchived()
    # Each comment is a live event to the whole conversation: it counts as a post (429 past it).
    count_post(actor)
    with transaction.atomic():
        comment = ArtifactComment.objects.create(
            artifact=artifact, version=version, parent=parent, body=body, **_authors(actor)
        )
        publish_live(
            audience_topics(artifact.conversation),
            "artifact.commented",
            conversation_id=artifact.conversation_id,
            artifact=artifact_ref(artifact),
            comment_id=comment.id,
        )
    return comment


# ---- card buttons (CARD-4) ----------------------------------------------------------------


def use_card_action(user, message: Message, item_index, action_id) -> dict:
    """A person clicked a card button: record the outcome on the card and hand the click to the
    card's author agent as work, in one transaction. The message row is locked for the
    read-modify-write, so two concurrent clicks on a `once` button yield exactly one.

    Send / Save draft on an email draft are done at once through the mailbox (as the person who
    clicked), not handed to the agent; a refusal there (no account connected) changes nothing.
    A sent email's buttons, an archived conversation's, and (but for the mailbox's) those of an
    agent no longer in the conversation are refused.

    Returns {"outcome", "message", "work"}: WORK is {"type": "message", "id", "delivery"} (the
    click, and the agent's work item on it, which the page's Stop stops), or None by mail."""
    with transaction.atomic():
        locked = (
            Message.objects.select_for_update(of=("self",))
            .select_related("conversation__workspace", "author_agent", "author_user")
            .get(pk=message.pk)
        )
        payload = locked.payload or {}
        item, action = card_button(payload, item_index, action_id)
        agent = locked.author_agent
        if agent is None:
            # An agent deleted since leaves its cards without an author (SET_NULL).
            who = "was not posted by an agent" if locked.author_user_id else "lost its agent"
            raise CardActionUnavailable(f"This card {who}, so its buttons have no one to reach.")
        # Read-only once archived: no click is posted, and no mail goes out from it either.
        if is_archived(locked.conversation):
            raise ConversationArchived()
        key = f"{item_index}:{action_id}"
        outcomes = dict(payload.get("card_outcomes") or {})
        if action["once"] and key in outcomes:
            raise ActionUsed()
        by_mail = is_email_action(payload, action_id)
        # An email is sent once, whatever `once` the agent gave its Send; then it is no draft.
        if by_mail and f"{item_index}:send" in outcomes:
            raise ActionUsed("This email has already been sent.")
        if not by_mail and not _takes_part(agent, locked.conversation):
            # Taken out of the conversation, it reads nothing more of it: not this click either.
            raise CardActionUnavailable(
                f"{agent.name} no longer takes part in this conversation, so its buttons have "
                "no one to reach."
            )
        if by_mail:
            # Counted as a post is (the other clicks are posts): each one calls the mailbox and
            # re-renders the card for everyone watching.
            count_post(user)
            # The mail goes out while the row is locked: a second click of Send waits for the
            # first one's outcome instead of sending the email twice.
            outcome = _use_mailbox(user, locked, item, item_index, action_id, outcomes)
        else:
            outcome = {"status": "done", "label": f"{action['label']} ✓", "by": str(user.id)}
        outcomes[key] = outcome
        locked.payload = with_card_html({**payload, "card_outcomes": outcomes})
        locked.save(update_fields=["payload", "updated_at"])
        work = None
        if not by_mail:
            label, title = _one_line(action["label"]), _one_line(item["title"])
            click = post_message(
                user,
                locked.conversation,
                f"{user.label} chose “{label}” on “{title}”",
                kind=Message.Kind.ACTION,
                payload={
                    "card_message_id": str(locked.id),
                    "action_id": action_id,
                    "item_index": item_index,
                    "item": {"title": item["title"], "data": item.get("data", {})},
                },
                wake=[agent.id],
            )
            delivery = click.deliveries.filter(agent=agent).values_list("id", flat=True).first()
            work = {"type": "message", "id": click.id, "delivery": delivery}
        announce_message(locked, "message.updated")
    return {"outcome": outcome, "message": locked, "work": work}


def _one_line(text: str) -> str:
    """Text an agent wrote, quoted in a person's message: kept to one line, it cannot pass for
    more lines of theirs."""
    return " ".join(text.split())


def _takes_part(agent, conversation: Conversation) -> bool:
    return conversations_visible_to(agent).filter(pk=conversation.pk).exists()


def _use_mailbox(user, card: Message, item: dict, item_index, action_id, outcomes) -> dict:
    """Send or save the card item's email; the outcome records the provider's ids."""
    email = email_of(item)
    # A draft saved from this card before: sending sends it, saving again updates it.
    saved = outcomes.get(f"{item_index}:save_draft")
    if action_id == "send":
        done, label = mailbox().send(user, card, email, saved), "Sent ✓"
    else:
        done, label = mailbox().save_draft(user, card, email, saved), "Draft saved ✓"
    return {"status": "done", "label": label, "by": str(user.id), **done}


# ---- the card template library (CARD-2) -----------------------------------------------------


def validated_template(data: dict) -> dict:
    """Check a template as staff typed it; CardInvalid names the offending field."""
    try:
        return validate_template(data)
    except CardError as exc:
        raise CardInvalid(
            f"Invalid template: {exc.message}", fields={exc.field_path or "template": exc.message}
        ) from None


def save_card_template(template: CardTemplate) -> CardTemplate:
    """Store a staff edit: a new template starts at version 1, every change after that is the
    next version. Cards already sent keep the layout they sealed."""
    with transaction.atomic():
        if template._state.adding:
            template.version = 1
        else:
            current = CardTemplate.objects.select_for_update().get(pk=template.pk)
            template.version = current.version + 1
        normalised = validated_template(template.as_template())
        template.layout = normalised["layout"]
        template.default_actions = normalised["default_actions"]
        template.sample = normalised.get("sample")
        template.save()
    return template


def delete_card_template(template: CardTemplate) -> None:
    """Remove a template; cards already sent keep rendering from their sealed copy."""
    template.delete()


def seed_card_templates(model=CardTemplate) -> int:
    """Create the platform templates that are missing (never overwrites staff edits). MODEL is
    the historical model when a migration calls this."""
    existing = set(model.objects.values_list("name", flat=True))
    seeds = [validate_template(t) for t in SEED_TEMPLATES if t["name"] not in existing]
    model.objects.bulk_create(
        [
            model(
                name=t["name"],
                result_type=t["result_type"],
                description=t["description"],
                version=t["version"],
                layout=t["layout"],
                default_actions=t["default_actions"],
                sample=t.get("sample"),
            )
            for t in seeds
        ]
    )
    return len(seeds)
