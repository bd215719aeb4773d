"""Telegram as an outside channel (API-3): a Telegram chat linked to a conversation, messages both
ways through the one pipeline. docs/telegram.md says how it is set up and what is stored.

- A workspace admin stores the workspace's bot token (``set_bot``): checked with ``getMe``,
  encrypted at rest, never shown again. With ``TELEGRAM_WEBHOOK_BASE`` set, Telegram is told to
  post updates to our webhook with a secret header (``setWebhook``); otherwise the
  ``telegram_poll`` command asks for them (``getUpdates``).
- A person who can read a conversation makes a link (``create_link``) and gets a one-time code
  (kept hashed, stale after ``TELEGRAM_CODE_MINUTES``); sent to the bot in a chat (``/start
  <code>`` or the code alone), it binds that chat to the conversation.
- An update from a bound chat (``handle_update``) becomes a message posted with
  ``conversations.actions.post_message`` **on behalf of the person who linked the chat**, with
  the Telegram sender in ``payload["external_author"]`` (shown by the UI and told to agents).
  A Telegram sender is never a user, member or participant of anything: the chat reaches exactly
  what the linking person could, and nothing once they no longer can (checked on every message).
- Messages of the conversation (people's and agents', not the ones that came from the chat)
  leave through the relay hook of ``conversations.relays``: after commit a ``TelegramSend`` row
  is made once per message and a job sends it (``deliver``), retried by ``retry_sends``.
- A message sent there and later edited or deleted here is edited (``editMessageText``) or
  deleted (``deleteMessage``) in the chat too: the same row goes back to pending (``relay_change``
  queues ``message_changed``) and the same job and retries carry the change.
"""

import asyncio
import hmac
import logging
import os
import re
import secrets
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction
from django.db.models import Q
from django.utils import timezone
from django_q.tasks import async_task
from telegram import Bot, Update
from telegram.error import BadRequest, InvalidToken, NetworkError, RetryAfter, TelegramError
from telegram.request import HTTPXRequest

from agntchat.core import crypto
from agntchat.core.exceptions import AppError, Conflict, NotFound
from agntchat.core.ids import as_uuid
from agntchat.core.limits import hold
from conversations import relays
from conversations.access import access_conversation, may_configure
from conversations.actions import post_message, post_notice
from conversations.exceptions import ConversationArchived
from conversations.models import Conversation, Message
from integrations.models import TelegramBot, TelegramLink, TelegramSend
from workspaces.access import access_membership, require_manager
from workspaces.audit import record_audit
from workspaces.exceptions import NotAllowed

log = logging.getLogger(__name__)

# The library's own opt-in to what its next major version gives: time periods (a 429's
# retry_after) as timedelta. Without it every 429 it parses warns that ints are deprecated.
os.environ.setdefault("PTB_TIMEDELTA", "true")

RELAY = "telegram"  # the name in a linked conversation's settings["relays"]
# What BotFather hands out: the bot's id, a colon, a secret. Checked before it goes in a URL.
TOKEN = re.compile(r"^[0-9]{1,20}:[A-Za-z0-9_-]{20,100}$")
MAX_ATTEMPTS = 8
MAX_TEXT = 4096  # sendMessage's limit
CALL_TIMEOUT = 10.0
REPLAYED_WITHIN_HOURS = 24  # how long Telegram keeps an update it could send again


class TelegramNotSetUp(Conflict):
    code = "telegram_not_set_up"
    default_message = "This workspace has no Telegram bot: an admin sets its token first."


class TelegramTokenRefused(AppError):
    code = "telegram_token_refused"
    status = 400
    default_message = "Telegram refused this bot token."


class TelegramUnreachable(AppError):
    code = "telegram_unreachable"
    status = 502
    default_message = "Telegram could not be reached. Try again in a moment."


class TelegramAlreadyLinked(Conflict):
    code = "telegram_already_linked"
    default_message = "This conversation is already linked to a Telegram chat: unlink it first."


class TelegramBotInUse(Conflict):
    code = "telegram_bot_in_use"
    default_message = (
        "This bot already serves another workspace, and Telegram sends a bot's updates to one "
        "place only: make a bot of its own for this workspace with BotFather."
    )


class TelegramBotNotFound(NotFound):
    code = "telegram_bot_not_found"
    default_message = "This workspace has no Telegram bot."


class TelegramLinkNotFound(NotFound):
    code = "telegram_link_not_found"
    default_message = "Telegram link not found."


# ---- calls to the Bot API, through python-telegram-bot's Bot ----------------------------------


def _run(coroutine: Awaitable):
    """Run a coroutine to its end from sync code (views, jobs, commands). In a thread that already
    runs an event loop, in a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def call(token: str, method: Callable[[Bot], Awaitable], *, poll_timeout: int = 0):
    """METHOD(bot) with a Bot for TOKEN pointed at ``TELEGRAM_API_BASE``; its HTTP clients closed
    after. Raises python-telegram-bot's errors (InvalidToken for a refused token)."""

    async def run():
        request = HTTPXRequest(connect_timeout=CALL_TIMEOUT, read_timeout=CALL_TIMEOUT)
        updates = HTTPXRequest(connect_timeout=CALL_TIMEOUT, read_timeout=poll_timeout + 10)
        bot = Bot(
            token,
            base_url=f"{settings.TELEGRAM_API_BASE}/bot{{token}}",
            request=request,
            get_updates_request=updates,
        )
        try:
            return await method(bot)
        finally:
            await asyncio.gather(request.shutdown(), updates.shutdown())

    return _run(run())


def _token(bot: TelegramBot) -> str:
    return crypto.decrypt(bot.token_ciphertext)


def webhook_url(bot: TelegramBot) -> str:
    return f"{settings.TELEGRAM_WEBHOOK_BASE}/telegram/{bot.id}/webhook/"


# ---- the workspace's bot ------------------------------------------------------------------------


def bot_of(workspace_id) -> TelegramBot | None:
    return TelegramBot.objects.filter(workspace_id=workspace_id).first()


def set_bot(user, workspace_id, token: str) -> TelegramBot:
    """Store (or replace) the workspace's bot token: admins only. The token is checked with
    ``getMe`` first: refused, nothing is stored. Then updates are routed: a webhook with a fresh
    secret when this server has a public URL, else ``deleteWebhook`` so that polling works. A
    token of another bot than the one stored unlinks the old bot's chats; a bot another workspace
    has is refused (TelegramBotInUse)."""
    membership = access_membership(user, workspace_id)
    require_manager(membership)
    token = token.strip()
    if not TOKEN.match(token):
        raise TelegramTokenRefused(
            "That is not a bot token: BotFather gives one like 123456:ABC-DEF….",
            fields={"token": "Not a bot token."},
        )
    me = _checked(lambda bot: bot.get_me(), token)
    replaced = None  # the token of another bot this one replaces
    with transaction.atomic():
        # Two workspaces saving one bot at once: the second waits here and sees the first's row.
        hold(f"telegram-bot:{me.id}")
        others = TelegramBot.objects.filter(telegram_id=me.id)
        if others.exclude(workspace=membership.workspace).exists():
            raise TelegramBotInUse()
        row = TelegramBot.objects.select_for_update().filter(workspace=membership.workspace).first()
        if row is not None and row.telegram_id != me.id:
            _forget_links(row)
            row.update_offset = 0
            replaced = _token(row)
        row = row or TelegramBot(workspace=membership.workspace, created_by=user)
        row.token_ciphertext = crypto.encrypt(token)
        row.telegram_id = me.id
        row.username = me.username or ""
        row.name = me.full_name or ""
        row.problem = ""
        secret = secrets.token_urlsafe(32) if settings.TELEGRAM_WEBHOOK_BASE else ""
        row.webhook_secret_hash = crypto.hash_secret(secret) if secret else ""
        row.save()
        record_audit(
            "telegram_bot.set", actor=user, workspace=membership.workspace, target=row,
            label=f"@{row.username}" if row.username else row.name,
        )  # fmt: skip
        # Inside the transaction: a webhook Telegram refused leaves the old settings as they were.
        if secret:
            _checked(
                # One connection: Telegram posts the next update once this one is answered, so
                # they come in order, as handle_update's offset expects (by default, 40 at once).
                lambda bot: bot.set_webhook(
                    webhook_url(row),
                    secret_token=secret,
                    allowed_updates=["message"],
                    max_connections=1,
                ),
                token,
            )
        else:
            _checked(lambda bot: bot.delete_webhook(), token)
    if replaced is not None:
        _stop_updates(replaced)
    return row


def clear_bot(user, workspace_id) -> None:
    """Forget the workspace's bot (admins): every chat linked through it is unlinked, and Telegram
    is asked to stop posting updates (best effort: the token is forgotten either way)."""
    membership = access_membership(user, workspace_id)
    require_manager(membership)
    row = bot_of(membership.workspace_id)
    if row is None:
        raise TelegramBotNotFound()
    token = _token(row)
    with transaction.atomic():
        _forget_links(row)
        record_audit(
            "telegram_bot.removed", actor=user, workspace=membership.workspace, target=row,
            label=f"@{row.username}" if row.username else row.name,
        )  # fmt: skip
        row.delete()
    _stop_updates(token)


def _stop_updates(token: str) -> None:
    """A bot forgotten or replaced: Telegram is asked to stop posting its updates here (best
    effort), which would otherwise be refused (404) and sent again for as long as it tries."""
    if settings.TELEGRAM_WEBHOOK_BASE:
        try:
            call(token, lambda bot: bot.delete_webhook())
        except TelegramError as exc:
            log.warning("Telegram deleteWebhook failed for a forgotten bot: %s", exc)


def _forget_links(bot: TelegramBot) -> None:
    for link in bot.links.select_related("conversation"):
        relays.set_relayed(link.conversation, RELAY, False)
    bot.links.all().delete()


def _checked(method, token: str):
    try:
        return call(token, method)
    except InvalidToken:
        raise TelegramTokenRefused(
            "Telegram refused this bot token: copy it again from BotFather.",
            fields={"token": "Refused by Telegram."},
        ) from None
    except (NetworkError, RetryAfter) as exc:
        raise TelegramUnreachable(f"Telegram could not be reached: {exc}") from None
    except TelegramError as exc:
        raise TelegramTokenRefused(f"Telegram refused: {exc}", fields={"token": str(exc)}) from None


# ---- links ----------------------------------------------------------------------------------------


def links_of(conversation: Conversation):
    return TelegramLink.objects.filter(conversation=conversation).select_related("bot")


def access_link(conversation: Conversation, link_id) -> TelegramLink:
    """A link of CONVERSATION (which the caller has read through ``access_conversation``)."""
    link = links_of(conversation).filter(pk=as_uuid(link_id)).first()
    if link is None:
        raise TelegramLinkNotFound()
    return link


def create_link(user, conversation_id) -> tuple[TelegramLink, str]:
    """A link of a conversation USER can read to a chat yet to be named: returns it with its code
    (shown once). A pending link of the conversation is replaced (a new code); a bound one must be
    unlinked first."""
    conversation = access_conversation(user, conversation_id)
    if conversation.archived_at is not None:
        raise ConversationArchived()
    bot = bot_of(conversation.workspace_id)
    if bot is None:
        raise TelegramNotSetUp()
    code = secrets.token_urlsafe(16)
    with transaction.atomic():
        existing = TelegramLink.objects.select_for_update().filter(conversation=conversation)
        if any(link.chat_id is not None for link in existing):
            raise TelegramAlreadyLinked()
        existing.delete()
        link = TelegramLink.objects.create(
            bot=bot,
            conversation=conversation,
            created_by=user,
            code_hash=crypto.hash_secret(code),
            code_expires_at=timezone.now() + timedelta(minutes=settings.TELEGRAM_CODE_MINUTES),
        )
    return link, code


def delete_link(user, link: TelegramLink) -> None:
    """Unlink: nothing more comes from the chat or goes to it (unsent messages are dropped). The
    person who made the link, or whoever may change the conversation's settings."""
    conversation = link.conversation
    if link.created_by_id != user.id and not may_configure(
        access_membership(user, conversation.workspace_id), conversation
    ):
        raise NotAllowed("Only who linked this chat, or who may change the conversation, can.")
    with transaction.atomic():
        relays.set_relayed(conversation, RELAY, False)
        link.delete()
    if link.chat_id is not None:
        post_notice(conversation, f"Telegram chat “{link.chat_title}” unlinked by {user.label}.")


# ---- updates in: webhook and polling -------------------------------------------------------------


def webhook_bot(bot_id, secret: str) -> TelegramBot | None:
    """The bot whose webhook this is, if SECRET is the one we gave Telegram (else None)."""
    bot = TelegramBot.objects.filter(pk=as_uuid(bot_id)).exclude(webhook_secret_hash="").first()
    if bot is None or not hmac.compare_digest(
        bot.webhook_secret_hash, crypto.hash_secret(secret or "")
    ):
        return None
    return bot


def handle_update(bot: TelegramBot, update: Update) -> bool:
    """Handle one update, once: under the bot row's lock, an update below the stored offset is
    skipped (unless a day has passed since the offset last moved: then Telegram has started its
    ids again); the offset moves past it in the same transaction as what it posts. One refused
    (AppError) or failing on our side is passed, not tried again: it would come back before every
    later update. True if handled (False: seen before)."""
    replies: list[tuple[int, str]] = []
    with transaction.atomic():
        row = TelegramBot.objects.select_for_update().get(pk=bot.pk)
        # Telegram keeps an update a day at most, and after a week without any it starts its
        # ids again at a random one: a lower id that long after the last update is a new one.
        quiet = row.updated_at <= timezone.now() - timedelta(hours=REPLAYED_WITHIN_HOURS)
        if update.update_id < row.update_offset and not quiet:
            return False
        row.update_offset = update.update_id + 1
        row.save(update_fields=["update_offset", "updated_at"])
        try:
            with transaction.atomic():  # a refused post leaves nothing half-written
                _handle(row, update, replies)
        except AppError as exc:  # refused by an action: dropped, never retried forever
            log.info("Telegram update %s not posted: %s", update.update_id, exc.message)
            if update.message is not None:  # the chat is told, not left to think it went
                replies.append((update.message.chat.id, f"Not posted in agntchat: {exc.message}"))
        except (OperationalError, InterfaceError):
            raise  # passing (a deadlock, a lost connection): handled when it comes again
        except Exception:
            # A fault of ours with this update would fail again each time it came back, and it
            # comes back first: every later update of the bot would wait behind it for good.
            log.exception("Telegram update %s could not be handled", update.update_id)
    for chat_id, text in replies:
        _reply(row, chat_id, text)
    return True


START = re.compile(r"^/start(?:@\w+)?(?:\s+(\S+))?\s*$")
CODE = re.compile(r"^[A-Za-z0-9_-]{22}$")


def _handle(bot: TelegramBot, update: Update, replies: list) -> None:
    message = update.message
    if message is not None and (message.migrate_to_chat_id or message.migrate_from_chat_id):
        # A group became a supergroup, under a new id (said in both chats): the link follows.
        if message.migrate_to_chat_id:
            _migrate(bot, message.chat.id, message.migrate_to_chat_id)
        else:
            _migrate(bot, message.migrate_from_chat_id, message.chat.id)
        return
    if message is None or message.text is None:
        return  # only text messages: edits, photos, joins … are not relayed (docs/telegram.md)
    chat_id, text = message.chat.id, message.text.strip()
    start = START.match(text)
    code = start.group(1) if start else (text if CODE.match(text) else None)
    link = TelegramLink.objects.filter(bot=bot, chat_id=chat_id).select_related("created_by")
    link = link.first()
    if code is not None and (start or link is None):
        _bind(bot, message, code, link, replies)
        return
    if start:  # "/start" alone: a greeting, not a message for the conversation
        if link is None:
            replies.append((chat_id, "Send /start followed by the code agntchat showed you."))
        return
    if link is None:
        if message.chat.type == "private":
            replies.append((chat_id, "This chat is not linked. Send the code agntchat showed you."))
        return
    conversation = _readable_by_linker(link)
    if conversation is None:
        return
    sender = message.from_user
    post_message(
        link.created_by,
        conversation,
        text,
        payload={
            "external_author": {
                "channel": RELAY,
                "name": (sender.full_name if sender else "") or message.chat.title or "Telegram",
                "username": (sender.username if sender else None) or None,
                "id": sender.id if sender else None,
            }
        },
        client_ref=f"tg:{chat_id}:{message.message_id}",
    )


def _migrate(bot: TelegramBot, old_chat_id: int, new_chat_id: int) -> None:
    """The chat OLD_CHAT_ID is now NEW_CHAT_ID: its link, if any, is moved to it (unless the new
    one is linked already)."""
    link = TelegramLink.objects.select_for_update().filter(bot=bot, chat_id=old_chat_id).first()
    if link is None or TelegramLink.objects.filter(bot=bot, chat_id=new_chat_id).exists():
        return
    link.chat_id = new_chat_id
    link.save(update_fields=["chat_id", "updated_at"])


def _readable_by_linker(link: TelegramLink) -> Conversation | None:
    """LINK's conversation if the person who linked the chat may still read it. A chat reaches
    no further than that person, both ways: nothing is posted from it or sent to it once they
    are removed from the workspace or the conversation, or their account is deactivated."""
    # A deactivated account keeps its memberships but may read nothing.
    if link.created_by.is_active:
        try:
            return access_conversation(link.created_by, link.conversation_id)
        except NotFound:
            pass
    log.info("Telegram link %s: its creator can no longer read the conversation", link.id)
    return None


def _bind(bot, message, code: str, bound: TelegramLink | None, replies: list) -> None:
    chat_id = message.chat.id
    link = (
        TelegramLink.objects.select_for_update()
        .filter(bot=bot, code_hash=crypto.hash_secret(code))
        .select_related("created_by", "conversation")
        .first()
    )
    if link is None or link.code_expires_at is None or link.code_expires_at <= timezone.now():
        replies.append((chat_id, "This code is not valid: it expired or was used. Make a new one."))
        return
    if bound is not None:
        replies.append((chat_id, "This chat is already linked to a conversation: unlink it first."))
        return
    conversation = _readable_by_linker(link)
    if conversation is None:
        replies.append((chat_id, "This code is not valid: it expired or was used. Make a new one."))
        return
    link.chat_id = chat_id
    link.chat_title = message.chat.title or message.chat.full_name or str(chat_id)
    link.code_hash = None
    link.code_expires_at = None
    link.linked_at = timezone.now()
    link.save()
    relays.set_relayed(conversation, RELAY, True)
    # Shown in the conversation, and relayed to the chat as its confirmation.
    post_notice(
        conversation,
        f"Linked to the Telegram chat “{link.chat_title}” by {link.created_by.label}: "
        "messages there appear here, and replies here are sent there.",
    )


def _reply(bot: TelegramBot, chat_id: int, text: str) -> None:
    """A word to a chat from the bot itself (a bad code …): best effort, never a message."""
    try:
        call(_token(bot), lambda b: b.send_message(chat_id, text))
    except TelegramError as exc:
        log.info("Telegram reply to chat %s failed: %s", chat_id, exc)


def poll_once(bot: TelegramBot, timeout: int = 0) -> int:
    """Ask Telegram for the bot's updates past the stored offset (``getUpdates``, waiting up to
    TIMEOUT seconds for one) and handle each. Returns how many were handled."""
    try:
        updates = call(
            _token(bot),
            lambda b: b.get_updates(
                offset=bot.update_offset or None, timeout=timeout, allowed_updates=["message"]
            ),
            poll_timeout=timeout,
        )
    except TelegramError as exc:
        TelegramBot.objects.filter(pk=bot.pk).update(problem=f"getUpdates failed: {exc}")
        raise
    if bot.problem:
        TelegramBot.objects.filter(pk=bot.pk).update(problem="")
    handled = 0
    for update in updates:
        handled += handle_update(bot, update)
    bot.refresh_from_db(fields=["update_offset"])
    return handled


def polled_bots():
    """The bots whose updates are asked for: those without a webhook."""
    return TelegramBot.objects.filter(webhook_secret_hash="")


# ---- messages out ---------------------------------------------------------------------------------


def relay(conversation: Conversation, message: Message) -> None:
    """The relay hook (``conversations.relays``), after commit: a send for the conversation's
    bound chat, once per message, and a job to send it. Not what came from Telegram itself, nor
    card clicks."""
    if message.kind == Message.Kind.ACTION:
        return
    if (message.payload or {}).get("external_author", {}).get("channel") == RELAY:
        return
    if "edit_of" in (message.payload or {}):
        return  # the agents' notice of an edit: the chat gets the edit itself (relay_change)
    link = (
        TelegramLink.objects.filter(conversation=conversation, chat_id__isnull=False)
        .select_related("created_by")
        .first()
    )
    if link is None or _readable_by_linker(link) is None:
        return
    send, created = TelegramSend.objects.get_or_create(
        link=link, message=message, defaults={"next_attempt_at": timezone.now()}
    )
    if created:
        async_task("integrations.telegram.deliver", send.id, task_name=f"telegram-send-{send.id}")


def relay_change(conversation: Conversation, message: Message) -> None:
    """The change hook (``conversations.relays``), after commit: MESSAGE was edited or deleted.
    A job puts its sends back in the queue; it may wait on a send in progress, the post never."""
    async_task(
        "integrations.telegram.message_changed",
        str(message.id),
        task_name=f"telegram-change-{message.id}",
    )


def message_changed(message_id) -> int:
    """Put the sends of a changed message that reached a chat back to pending, so ``deliver``
    edits or deletes the chat's copy; a send not made yet sends the message as it is by then (or
    nothing, deleted). Each row is locked first: a send in flight, which may have read the old
    text, is waited for and then changed. Returns how many chats were brought up to date now."""
    changed = 0
    sends = TelegramSend.objects.filter(message_id=message_id)
    for send_id in sends.exclude(status=TelegramSend.Status.DELETED).values_list("id", flat=True):
        with transaction.atomic():
            send = TelegramSend.objects.select_for_update().filter(pk=send_id).first()
            if send is None or send.telegram_message_id is None:
                continue  # not in the chat (yet): its send reads the message as it is now
            if send.status == TelegramSend.Status.DELETED:
                continue
            # A fresh count of tries for the change.
            send.status, send.attempts, send.problem = TelegramSend.Status.PENDING, 0, ""
            send.next_attempt_at = timezone.now()
            send.save(
                update_fields=["status", "attempts", "problem", "next_attempt_at", "updated_at"]
            )
        changed += deliver(send_id)
    return changed


relays.add_relay(RELAY, relay, changed=relay_change)


def outgoing_text(message: Message) -> str:
    """What the chat reads: who wrote it, then the text (and the names of its files)."""
    author = message.author.label if message.author else "agntchat"
    if message.kind == Message.Kind.NOTICE:
        text = f"ⓘ {message.body}"
    else:
        text = f"{author}: {message.body}" if message.body else f"{author}:"
    files = [a["name"] for a in (message.payload or {}).get("attachments", ())]
    if files:
        text += "\n" + "\n".join(f"📎 {name}" for name in files)
    return text


def utf16_len(text: str) -> int:
    """TEXT's length as Telegram counts it: in UTF-16 code units (two for a character past
    U+FFFF, an emoji most often)."""
    return len(text) + sum(1 for char in text if ord(char) > 0xFFFF)


def _fitting(text: str, limit: int) -> int:
    """How many characters of TEXT's start fit in LIMIT UTF-16 code units."""
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > limit:
            return index
    return len(text)


def split_text(text: str, limit: int = MAX_TEXT) -> list[str]:
    """TEXT as the messages a chat reads, in order, each at most LIMIT UTF-16 code units: cut at
    the last paragraph break that fits, else line break, else space (in the second half of what
    fits, so that no part is tiny), else between two characters (a Python str holds characters,
    not UTF-16 units: no surrogate pair is cut in two). Telegram trims each message: so do we."""
    parts, text = [], text.strip()
    while utf16_len(text) > limit:
        cut = _fitting(text, limit)
        for separator in ("\n\n", "\n", " "):
            at = text.rfind(separator, cut // 2, cut)
            if at > 0:
                cut = at
                break
        parts.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    return [*parts, text]


# Why a send waits, not yet tried: an earlier message to its chat is not there yet.
WAITING = "Waiting for an earlier message to this chat to be sent."


def deliver(send_id) -> bool:
    """Bring one pending send's chat up to date: send the message (``sendMessage``, in several
    parts past Telegram's limit), or, once sent, show its edit (``editMessageText``) or its
    deletion (``deleteMessage``). The row is taken under a lock (another worker on the same row
    skips it) and marked done in the same transaction, so each is done once. A failure is tried
    again later (``retry_sends``), backing off, up to MAX_ATTEMPTS; Telegram asking to slow down
    (429) is waited out, however often. Sends to one chat go in the order of their messages: one
    behind an earlier one not sent yet waits (WAITING), and goes right after it, here. True if
    done now."""
    done, link_id = _deliver(send_id)
    follows = done
    while follows:
        waiting = _unsent(link_id).filter(problem=WAITING).values_list("id", flat=True).first()
        if waiting is None:
            break
        # On while each goes (or is done with: deleted meanwhile); a send still behind another,
        # or in another worker's hands, ends it.
        follows = _deliver(waiting)[0] or not _unsent(link_id).filter(pk=waiting).exists()
    return done


def _unsent(link_id):
    """The sends to a chat whose message is not (wholly) there yet, in the messages' order."""
    return TelegramSend.objects.filter(
        link_id=link_id, status=TelegramSend.Status.PENDING, sent_at__isnull=True
    ).order_by("message__created_at", "message_id")


def _deliver(send_id) -> tuple[bool, object]:
    """``deliver`` of one send: (done now, its link's id)."""
    with transaction.atomic():
        link_id = (
            TelegramSend.objects.filter(pk=send_id, status=TelegramSend.Status.PENDING)
            .values_list("link_id", flat=True)
            .first()
        )
        # One send to a chat at a time, so that an earlier one in flight is waited for and seen:
        # the link's row is locked first (the send's lock after it is never waited for).
        locked = TelegramLink.objects.select_for_update().filter(pk=link_id)
        if link_id is None or not list(locked.values_list("pk", flat=True)):
            return False, None
        send = (
            TelegramSend.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related(
                "link__bot", "link__created_by", "message__author_user", "message__author_agent"
            )
            .filter(pk=send_id, status=TelegramSend.Status.PENDING)
            .first()
        )
        if send is None or send.link.chat_id is None:
            return False, None  # sent, given up, unlinked, or in another worker's hands
        link, message = send.link, send.message
        if message.deleted_at is not None and send.telegram_message_id is None:
            send.status = TelegramSend.Status.DELETED  # deleted before it was sent: never is
            send.save()
            return False, None
        if message.deleted_at is None and _readable_by_linker(link) is None:
            # Queued before its linker lost access: neither the text nor an edit goes out (a
            # deletion still does: it takes away, and shows nothing).
            send.status = TelegramSend.Status.FAILED
            send.problem = "The person who linked this chat can no longer read the conversation."
            send.save()
            return False, None
        if send.sent_at is None:
            earlier = _unsent(link.id).filter(
                Q(message__created_at__lt=message.created_at)
                | Q(message__created_at=message.created_at, message_id__lt=message.id)
            )
            last = earlier.order_by("-next_attempt_at").values_list("next_attempt_at", flat=True)
            due = last.first()
            if due is not None:  # not a failure: its attempts are not counted
                send.problem, send.next_attempt_at = WAITING, due
                send.save(update_fields=["problem", "next_attempt_at", "updated_at"])
                return False, None
        ids = [send.telegram_message_id, *send.part_message_ids] if send.telegram_message_id else []
        try:
            # Read here: the call runs on another thread's loop.
            parts = None if message.deleted_at is not None else split_text(outgoing_text(message))
            call(_token(link.bot), lambda b: _bring_up_to_date(b, link.chat_id, ids, parts))
        except Exception as exc:
            if not isinstance(exc, TelegramError):  # ours: counted too, or it would hold its chat
                log.exception("Telegram send %s failed", send.id)
            _keep_ids(send, ids)  # the parts that went: a retry goes on after them
            wait = _retry_after(exc)
            if wait is None:  # a 429 says when to try again: not a failure that gives it up
                send.attempts += 1
                wait = 30 * 2 ** (send.attempts - 1)
            send.problem = str(exc)[:500]
            send.next_attempt_at = timezone.now() + timedelta(seconds=min(wait, 3600))
            if send.attempts >= MAX_ATTEMPTS:
                send.status = TelegramSend.Status.FAILED
            send.save()
            return False, link.id
        _keep_ids(send, ids)
        if message.deleted_at is not None:
            send.status = TelegramSend.Status.DELETED
        else:
            send.status = TelegramSend.Status.SENT
        send.sent_at = send.sent_at or timezone.now()
        send.attempts += 1
        send.problem = ""
        send.save()
    return True, link.id


def _keep_ids(send: TelegramSend, ids: list[int]) -> None:
    send.telegram_message_id = ids[0] if ids else None
    send.part_message_ids = ids[1:]


# What Telegram answers when the chat already shows the change: nothing left to do.
ALREADY_DONE = ("message is not modified", "message to delete not found")


async def _bring_up_to_date(bot: Bot, chat_id: int, ids: list[int], parts: list[str] | None):
    """Make the chat show PARTS (None: the message was deleted) where it shows the bot's messages
    IDS: each part edited in place, sent after them if new, and those left over deleted. IDS
    follows what is done, up to a failure part-way, so that a retry goes on from there."""
    parts = parts or []
    for index, part in enumerate(parts):
        if index < len(ids):
            await _unless_done(bot.edit_message_text(part, chat_id=chat_id, message_id=ids[index]))
        else:
            ids.append((await bot.send_message(chat_id, part)).message_id)
    while len(ids) > len(parts):
        await _unless_done(bot.delete_message(chat_id, ids[-1]))
        ids.pop()


async def _unless_done(change: Awaitable) -> None:
    try:
        await change
    except BadRequest as exc:
        if not any(words in exc.message.lower() for words in ALREADY_DONE):
            raise


def _retry_after(exc: TelegramError) -> float | None:
    """Seconds Telegram asked to wait (429), whichever type this version of the library gives."""
    if not isinstance(exc, RetryAfter):
        return None
    wait = exc.retry_after
    return wait.total_seconds() if isinstance(wait, timedelta) else float(wait)


def retry_sends() -> int:
    """Every minute (django-q2 schedule): the sends due again, or whose job never ran. Returns how
    many were sent."""
    # In the messages' order: an earlier message's send first, then those that waited for it.
    due = TelegramSend.objects.filter(
        status=TelegramSend.Status.PENDING, next_attempt_at__lte=timezone.now()
    ).order_by("message__created_at", "message_id")
    return sum(deliver(send_id) for send_id in due.values_list("id", flat=True)[:200])
