"""Messages that leave through outside channels (API-3): the hook a layer above fills.

A conversation linked to an outside chat (Telegram, by ``integrations.telegram``) has the name of
that channel in ``settings["relays"]``. After a post is committed and shown, the pipeline hands
the message to every relay registered under a name the conversation lists (``add_relay``). The
conversation row is already loaded by every post, so a conversation linked to nothing pays
nothing: no query, no job. What a relay does (queue a send, skip its own inbound messages) is
its own business; it runs after commit and must not slow the post (queue a job, never call out).
A person's edit or deletion of a message goes the same way to the relays that follow changes
(``relay_changed``), so the outside chat's copy is changed too.

Outside channels live above this app (integrations). So that the pipeline never imports upward,
they register here when they load, as ``artifacts.mailbox`` is filled by integrations.
"""

from collections.abc import Callable

from django.db import transaction

from conversations.models import Conversation, Message

Relay = Callable[[Conversation, Message], None]

_relays: dict[str, Relay] = {}
_changes: dict[str, Relay] = {}


def add_relay(name: str, relay: Relay, changed: Relay | None = None) -> None:
    """RELAY is called, after commit, with every shown message of a conversation listing NAME;
    CHANGED, if given, with every message of it edited or deleted there."""
    _relays[name] = relay
    if changed is not None:
        _changes[name] = changed


def relays_of(conversation: Conversation) -> list[str]:
    return list((conversation.settings or {}).get("relays", ()))


def relay_posted(conversation: Conversation, messages: list[Message]) -> None:
    """Called by the pipeline with the messages a post made visible (the post, and held posts it
    released). Does nothing, and costs nothing, for a conversation linked to no outside chat."""
    names = [n for n in relays_of(conversation) if n in _relays]
    if not names:
        return

    def relay():
        for name in names:
            for message in messages:
                _relays[name](conversation, message)

    # Robust: an outside channel failing never turns a stored post into an error.
    transaction.on_commit(relay, robust=True)


def relay_changed(conversation: Conversation, message: Message) -> None:
    """Called by the actions that edit or delete MESSAGE, inside their transaction: after commit,
    the relays that follow changes hear of it. Costs nothing for a conversation linked to none."""
    names = [n for n in relays_of(conversation) if n in _changes]
    if not names:
        return

    def relay():
        for name in names:
            _changes[name](conversation, message)

    transaction.on_commit(relay, robust=True)


def set_relayed(conversation: Conversation, name: str, relayed: bool) -> None:
    """List NAME in the conversation's relays (or take it off): called by the outside channel's
    own actions when a chat is bound to the conversation or unlinked, after their own checks."""
    with transaction.atomic():
        row = Conversation.objects.select_for_update().get(pk=conversation.pk)
        settings = dict(row.settings or {})
        names = [n for n in settings.get("relays", ()) if n != name]
        if relayed:
            names.append(name)
        if names:
            settings["relays"] = sorted(names)
        else:
            settings.pop("relays", None)
        if settings != row.settings:
            row.settings = settings
            row.save(update_fields=["settings", "updated_at"])
    conversation.settings = row.settings


def outside_author(message: Message) -> str | None:
    """Who wrote MESSAGE in an outside chat it came from ("Dana (via Telegram)"), or None. Such a
    message is stored on behalf of the person who linked the chat; its writer is this."""
    external = (message.payload or {}).get("external_author")
    if not isinstance(external, dict) or not external.get("name"):
        return None
    return f"{external['name']} (via {str(external.get('channel', 'outside')).title()})"
