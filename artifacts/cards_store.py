"""Cards in messages: sealing a posted card with its layout, and rendering it from the seal.

A message payload with a card holds `card` (the validated result), `card_layout` (the layout
resolved when the message was saved), `card_html` (rendered here whenever the card changes, so
conversations show it without knowing cards) and, once buttons are used, `card_outcomes`.
"""

from artifacts.cards import (
    EMAIL_DRAFT,
    CardError,
    item_elements,
    render_card_html,
    render_card_json,
    resolve_layout,
    validate_card,
)
from artifacts.exceptions import CardActionNotFound, CardActionRule, CardInvalid, CardNotFound
from artifacts.models import CardTemplate

# Buttons of an email-draft card that stand for mailbox operations rather than a reply, with
# the only labels they may carry: a button that sends mail says so.
EMAIL_ACTIONS = {"send": "Send", "save_draft": "Save draft"}
# The rows of an email-draft item that are its recipients (artifacts/mailbox.py, email_of).
EMAIL_HEADERS = ("to", "cc", "bcc")


def template_lookup(name: str) -> dict | None:
    """An active template from the library, as a plain dict; None when unknown or retired."""
    template = CardTemplate.objects.filter(name=name, is_active=True).first()
    return template.as_template() if template else None


def seal_card_payload(payload: dict) -> dict:
    """Validate the card in PAYLOAD and return a new payload with the normalised card and its
    sealed layout; raise CardInvalid naming the field otherwise (nothing is stored)."""
    try:
        card = validate_card(payload["card"])
    except CardError as exc:
        where = f"card.{exc.field_path}" if exc.field_path else "card"
        raise CardInvalid(f"Invalid card: {exc.message}", fields={where: exc.message}) from None
    sealed = resolve_layout(card["type"], card.get("template"), lookup=template_lookup)
    _check_email_card(card, sealed)
    # Outcomes are the server's record of button use; a poster cannot pre-fill them.
    rest = {k: v for k, v in payload.items() if k not in CARD_KEYS}
    return with_card_html({**rest, "card": card, "card_layout": sealed})


CARD_KEYS = ("card", "card_layout", "card_outcomes", "card_html")


def with_card_html(payload: dict) -> dict:
    """PAYLOAD with its card rendered as stored HTML: every change of a card goes through here."""
    return {**payload, "card_html": card_html(payload)}


def _sealed(payload: dict) -> dict:
    # Every card stored through post_message is sealed; resolve late only for a hand-made row.
    return payload.get("card_layout") or resolve_layout(
        payload["card"]["type"], payload["card"].get("template"), lookup=template_lookup
    )


def card_html(payload: dict) -> str:
    """The card of a message payload as server-rendered HTML, the same for every client."""
    return str(
        render_card_html(payload["card"], _sealed(payload), payload.get("card_outcomes") or {})
    )


def card_json(payload: dict) -> dict:
    """The card of a message payload as element lists, for clients that do not render HTML."""
    return render_card_json(payload["card"], _sealed(payload), payload.get("card_outcomes") or {})


def card_button(payload: dict, item_index, action_id) -> tuple[dict, dict]:
    """The item and the action a click names, as the card shows them; 404 otherwise."""
    card = payload.get("card")
    if not isinstance(card, dict):
        raise CardNotFound()
    items = card["items"]
    if isinstance(item_index, bool) or not isinstance(item_index, int):
        raise CardActionRule("itemIndex must be a whole number.", fields={"item_index": "Invalid."})
    if not 0 <= item_index < len(items):
        raise CardActionNotFound(
            "The card has no such item.", fields={"item_index": f"Must be 0 to {len(items) - 1}."}
        )
    item = items[item_index]
    # Only the buttons the sealed layout shows exist: a hidden action cannot be clicked.
    shown = [
        el for el in item_elements(item, _sealed(payload), item_index) if el["kind"] == "actions"
    ]
    for action in shown[0]["actions"] if shown else []:
        if action["id"] == action_id:
            return item, {k: v for k, v in action.items() if k != "outcome"}
    raise CardActionNotFound(
        "The item has no such button.", fields={"action_id": "Not an action of this item."}
    )


def shows_email(sealed: dict) -> bool:
    """Whether a sealed layout is the email draft's, which shows all that Send mails: the subject
    (title), the To / Cc / Bcc rows and the body as plain text."""
    layout = sealed["layout"]
    return (
        sealed.get("template") == EMAIL_DRAFT
        and layout.get("rows") == "fields"
        and layout.get("body") == "text"
    )


def _relabelled_email_actions(card: dict) -> list[str]:
    """Paths of item buttons that would send or save mail under another label ("Add to cart")."""
    return [
        f"card.items[{i}].actions[{j}].label"
        for i, item in enumerate(card["items"])
        for j, action in enumerate(item.get("actions", []))
        if EMAIL_ACTIONS.get(action["id"], action["label"]) != action["label"]
    ]


def _check_email_card(card: dict, sealed: dict) -> None:
    """Refuse a card whose Send would mail something the person clicking it cannot see."""
    if EMAIL_DRAFT in (card["type"], card.get("template")) and not shows_email(sealed):
        message = "an email_draft card must use the email_draft template, which shows the email"
        raise CardInvalid(f"Invalid card: {message}.", fields={"card.template": message})
    relabelled = _relabelled_email_actions(card) if shows_email(sealed) else []
    if relabelled:
        message = "Send and Save draft on an email draft must say so"
        raise CardInvalid(f"Invalid card: {message}.", fields={relabelled[0]: message})
    split = _split_email_headers(card) if shows_email(sealed) else []
    if split:
        message = "the subject and each To, Cc and Bcc row of an email must be one line"
        raise CardInvalid(f"Invalid card: {message}.", fields={split[0]: message})


def _split_email_headers(card: dict) -> list[str]:
    """Paths of a subject or a recipient row over several lines: no email header can hold it,
    so every Send and Save draft of the card would fail."""
    paths = []
    for i, item in enumerate(card["items"]):
        if _multiline(item["title"]):
            paths.append(f"card.items[{i}].title")
        for j, field in enumerate(item.get("fields", [])):
            if field["label"].strip().lower() in EMAIL_HEADERS and _multiline(field["value"]):
                paths.append(f"card.items[{i}].fields[{j}].value")
    return paths


def _multiline(text: str) -> bool:
    # The email package's own rule for a header value (its breaks include \v and U+2028).
    return len(text.splitlines()) > 1


def is_email_action(payload: dict, action_id: str) -> bool:
    """Send / Save draft on a card that shows the email: done in the mailbox (artifacts/mailbox.py),
    not a reply. Checked again at the click for cards stored before posting refused the rest."""
    card, sealed = payload["card"], _sealed(payload)
    return (
        action_id in EMAIL_ACTIONS and shows_email(sealed) and not _relabelled_email_actions(card)
    )
