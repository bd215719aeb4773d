"""The mailbox behind an email-draft card's Send and Save draft buttons (CARD-4, INT-2).

Mail goes out through a connected account, and connections live above this app (integrations).
So that the card action never imports upward, integrations fills this hook in when it loads
(``set_mailbox``); with none set, the buttons refuse instead of pretending.
"""

from dataclasses import dataclass
from typing import Protocol

from artifacts.exceptions import CardActionUnavailable
from conversations.models import Message
from workspaces.models import User


@dataclass(frozen=True)
class Email:
    """The email an email-draft card item shows: its title is the subject, its text the body,
    its To / Cc / Bcc rows the recipients (and ``data.thread_id`` the thread it answers)."""

    to: str
    subject: str
    body: str
    cc: str = ""
    bcc: str = ""
    thread_id: str = ""


def email_of(item: dict) -> Email:
    """The email of an item the email-draft layout shows (cards_store.is_email_action decides):
    that layout shows every part read here, the body as plain text, so what is sent is seen."""
    rows = {}
    for field in item.get("fields", []):
        # Two To rows on the card are two recipients, not the last one only.
        label = field["label"].strip().lower()
        rows[label] = ", ".join(filter(None, (rows.get(label), str(field["value"]).strip())))
    data = item.get("data") or {}
    return Email(
        to=rows.get("to", ""),
        subject=item["title"],
        body=item.get("text", ""),
        cc=rows.get("cc", ""),
        bcc=rows.get("bcc", ""),
        thread_id=str(data.get("thread_id", "")),
    )


class Mailbox(Protocol):
    """Sends or saves EMAIL as USER, who clicked on CARD (a message in its conversation). SAVED
    is what an earlier Save draft on the card recorded (or None). Each returns what the card's
    outcome records (ids at the mail provider), or raises an AppError saying why not."""

    def send(self, user: User, card: Message, email: Email, saved: dict | None) -> dict: ...

    def save_draft(self, user: User, card: Message, email: Email, saved: dict | None) -> dict: ...


_mailbox: Mailbox | None = None


def set_mailbox(mailbox: Mailbox | None) -> None:
    global _mailbox
    _mailbox = mailbox


def mailbox() -> Mailbox:
    if _mailbox is None:
        raise CardActionUnavailable("Email cannot be sent from this server: no mailbox is set up.")
    return _mailbox
