"""REST for Telegram as an outside channel (API-3, docs/telegram.md): a workspace's bot token
(admins set and clear it; members see whether there is one, never the token), a conversation's
link to a chat (create: the code to send to the bot, shown once; list; delete); and the webhook
Telegram posts updates to, checked by its secret header."""

import json
import logging

from django.http import HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView
from telegram import Update

from agntchat.core.api import StrictSerializer, validated
from agntchat.core.exceptions import AppError
from agntchat.core.validation import check_json_text, json_value_problem
from conversations.access import access_conversation
from integrations import telegram
from integrations.models import TelegramBot, TelegramLink
from workspaces.access import IsPerson, access_membership


def bot_out(bot: TelegramBot | None) -> dict:
    if bot is None:
        return {"configured": False}
    return {
        "configured": True,
        "id": bot.id,
        "username": bot.username,
        "name": bot.name,
        "receives_by": "polling" if not bot.webhook_secret_hash else "webhook",
        "problem": bot.problem or None,
        "created_at": bot.created_at,
        "updated_at": bot.updated_at,
    }


def link_out(link: TelegramLink, code: str | None = None) -> dict:
    out = {
        "id": link.id,
        "conversation_id": link.conversation_id,
        "status": "linked" if link.chat_id is not None else "pending",
        "bot_username": link.bot.username,
        "chat_title": link.chat_title or None,
        "linked_at": link.linked_at,
        "code_expires_at": link.code_expires_at,
        "created_by": link.created_by_id,
        "created_at": link.created_at,
    }
    if code is not None:
        # Shown once, when made: only its hash is kept.
        out["code"] = code
        out["start_url"] = f"https://t.me/{link.bot.username}?start={code}"
    return out


class TelegramTokenInput(StrictSerializer):
    token = serializers.RegexField(
        telegram.TOKEN.pattern,
        max_length=130,
        help_text="The bot's token from BotFather (123456:ABC-…). Checked with Telegram; never "
        "shown again.",
    )


class TelegramLinkInput(StrictSerializer):
    """Making a link takes no body: an empty object (or none) only."""


class TelegramBotView(APIView):
    """The workspace's Telegram bot: whether there is one and who it is (members); set or replace
    its token, or forget it (admins)."""

    is_collection = False  # one record, not a page
    inputs = {"put": TelegramTokenInput}
    upstream = {"put": "Telegram could not be reached to check the token."}
    permission_classes = [IsPerson]

    def get(self, request, workspace_id):
        membership = access_membership(request.user, workspace_id)
        return Response(bot_out(telegram.bot_of(membership.workspace_id)))

    def put(self, request, workspace_id):
        """Store the bot token (checked with getMe; refused, nothing is stored)."""
        access_membership(request.user, workspace_id)
        data = validated(TelegramTokenInput, request.data)
        return Response(bot_out(telegram.set_bot(request.user, workspace_id, data["token"])))

    def delete(self, request, workspace_id):
        """Forget the token and unlink every chat linked through the bot."""
        telegram.clear_bot(request.user, workspace_id)
        return Response(status=204)


class TelegramLinkListView(APIView):
    """A conversation's link to a Telegram chat (at most one); make one: its code, to send to the
    workspace's bot in the chat (``/start <code>``), is in the answer and nowhere else."""

    inputs = {"post": TelegramLinkInput}
    permission_classes = [IsPerson]

    def get(self, request, conversation_id):
        conversation = access_conversation(request.user, conversation_id)
        return Response({"results": [link_out(link) for link in telegram.links_of(conversation)]})

    def post(self, request, conversation_id):
        access_conversation(request.user, conversation_id)
        validated(TelegramLinkInput, request.data)
        link, code = telegram.create_link(request.user, conversation_id)
        return Response(link_out(link, code), status=201)


class TelegramLinkDetailView(APIView):
    permission_classes = [IsPerson]

    def get(self, request, conversation_id, link_id):
        conversation = access_conversation(request.user, conversation_id)
        return Response(link_out(telegram.access_link(conversation, link_id)))

    def delete(self, request, conversation_id, link_id):
        """Unlink: nothing more comes from the chat or goes to it."""
        conversation = access_conversation(request.user, conversation_id)
        telegram.delete_link(request.user, telegram.access_link(conversation, link_id))
        return Response(status=204)


urlpatterns = [
    path("workspaces/<uuid:workspace_id>/telegram/", TelegramBotView.as_view()),
    path("conversations/<uuid:conversation_id>/telegram-links/", TelegramLinkListView.as_view()),
    path(
        "conversations/<uuid:conversation_id>/telegram-links/<uuid:link_id>/",
        TelegramLinkDetailView.as_view(),
    ),
]


# ---- the webhook (outside /api/: Telegram is its only client) -------------------------------------

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


MAX_UPDATE_BYTES = 1_000_000  # far past any update of Telegram's (a text is 4,096 at most)
log = logging.getLogger(__name__)


def _whole(value, bound: int = 2**62) -> bool:
    return type(value) is int and -bound < value < bound  # not a bool, and fits the database


def _text(value) -> bool:
    return value is None or isinstance(value, str)


def is_update(data) -> bool:
    """Whether DATA has the shape of the parts of an update we read (python-telegram-bot takes
    almost anything, and what it let through failed later as a 500, which Telegram retries)."""
    if not isinstance(data, dict) or not _whole(data.get("update_id")) or data["update_id"] < 0:
        return False
    message = data.get("message")
    if message is None:
        return True
    if not isinstance(message, dict) or not isinstance(message.get("chat"), dict):
        return False
    chat, sender = message["chat"], message.get("from")
    return (
        _whole(message.get("message_id"))
        and _whole(chat.get("id"))
        and all(_text(chat.get(k)) for k in ("type", "title", "first_name", "last_name"))
        and _text(message.get("text"))
        and all(
            message.get(k) is None or _whole(message[k])
            for k in ("migrate_to_chat_id", "migrate_from_chat_id")
        )
        and (
            sender is None
            or (
                isinstance(sender, dict)
                and _whole(sender.get("id"))
                and all(_text(sender.get(k)) for k in ("first_name", "last_name", "username"))
            )
        )
    )


def _read_update(body: bytes) -> tuple[Update | None, int | None, str]:
    """The update in BODY, or None, its id if it has one, and why not."""
    if len(body) > MAX_UPDATE_BYTES:
        return None, None, f"too big (over {MAX_UPDATE_BYTES} bytes)"
    try:
        check_json_text(body, max_bytes=MAX_UPDATE_BYTES)
        data = json.loads(body)
    except (AppError, ValueError) as exc:
        return None, None, f"not JSON ({exc})"
    update_id = data.get("update_id") if isinstance(data, dict) else None
    update_id = update_id if _whole(update_id) else None
    problem = json_value_problem(data)
    if problem is not None:  # PostgreSQL stores no NUL: it failed as a 500, sent again
        return None, update_id, problem
    if not is_update(data):
        return None, update_id, "not of an update's shape"
    try:
        return Update.de_json(data, None), update_id, ""
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        return None, update_id, f"refused by python-telegram-bot ({exc!r})"


@csrf_exempt
@require_POST
def webhook(request, bot_id):
    """An update from Telegram. Without the secret we gave Telegram for this bot: 404, nothing
    done, nothing read. Telegram retries what is not answered 2xx; an update seen before is
    answered 200 and skipped."""
    bot = telegram.webhook_bot(bot_id, request.headers.get(SECRET_HEADER, ""))
    if bot is None:
        return HttpResponse(status=404)
    # Read no further than the bound: past it, this is no update.
    update, update_id, problem = _read_update(request.read(MAX_UPDATE_BYTES + 1))
    if update is None:
        # Telegram posts one update at a time (max_connections=1) and sends again one refused:
        # refused, one we can never read would hold back every later one until Telegram gives
        # up on it. It is taken, and logged.
        shown = "(no id)" if update_id is None else update_id
        log.warning("Telegram update %s for bot %s not read: %s", shown, bot.id, problem)
        return JsonResponse({"ok": True})
    telegram.handle_update(bot, update)
    return JsonResponse({"ok": True})


webhook_urlpatterns = [path("telegram/<uuid:bot_id>/webhook/", webhook, name="telegram-webhook")]
