"""A local stand-in for Telegram's Bot API: a real HTTP server (in a thread of the test process)
answering ``/bot<token>/<method>`` as Telegram does, driven by python-telegram-bot's real ``Bot``
(``TELEGRAM_API_BASE`` points at it).

Wire format as Telegram's: parameters in the query string, a form (what python-telegram-bot
sends) or JSON; every answer in the ``{"ok": true, "result": …}`` envelope, every refusal as
``{"ok": false, "error_code", "description"}`` (401 "Unauthorized" for a token it does not know,
404 "Not Found" for an unknown method, 400 "Bad Request: chat not found", 409 for getUpdates while
a webhook is set, 429 with ``parameters.retry_after``).

Methods: getMe, sendMessage, editMessageText and deleteMessage (of the bot's own messages: 400
"message to edit not found" / "message to delete not found", "message is not modified"),
setWebhook, deleteWebhook, getWebhookInfo, getUpdates (``offset`` confirms the updates below it,
``timeout`` long-polls until one arrives). The test plays the
people in the chats (``say``): each message becomes an update, handed to getUpdates or, when a
webhook is set, built for it (``webhook_request``) with the secret Telegram would send.
"""

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.standin_server import LocalServer


def utf16_len(text: str) -> int:
    """A text's length as Telegram counts it: in UTF-16 code units (an emoji outside the BMP is
    two)."""
    return len(text.encode("utf-16-le")) // 2


@dataclass
class Seen:
    """One call the stand-in received."""

    token: str
    method: str
    params: dict[str, Any]


@dataclass
class BotAccount:
    id: int
    username: str
    first_name: str
    webhook_url: str = ""
    webhook_secret: str = ""
    updates: list[dict] = field(default_factory=list)  # not yet confirmed by an offset
    sent: list[dict] = field(default_factory=list)  # the bot's messages still in their chats


class Refused(Exception):
    def __init__(self, status: int, description: str, **parameters):
        super().__init__(description)
        self.status, self.description, self.parameters = status, description, parameters


class TelegramStandin(LocalServer):
    METHODS = ("GET", "POST")

    def __init__(self):
        self.bots: dict[str, BotAccount] = {}
        self.chats: dict[int, dict] = {}
        self.calls: list[Seen] = []
        self.failures: dict[str, list[Refused]] = {}
        self.lock = threading.RLock()
        self.arrived = threading.Condition(self.lock)
        self.update_ids = itertools.count(700_001)
        self.message_ids = itertools.count(1)

    # ---- the server ---------------------------------------------------------------------------

    def answer(self, http: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(http.path)
        length = int(http.headers.get("Content-Length") or 0)
        raw = http.rfile.read(length) if length else b""
        params = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        kind = http.headers.get("Content-Type", "")
        if raw and kind.startswith("application/json"):
            params.update(json.loads(raw))
        elif raw:
            params.update({k: v[-1] for k, v in parse_qs(raw.decode()).items()})
        path = unquote(parts.path)
        token, _, method = path.removeprefix("/bot").partition("/")
        with self.lock:
            self.calls.append(Seen(token, method, dict(params)))
        try:
            if not path.startswith("/bot") or token not in self.bots:
                raise Refused(401, "Unauthorized")
            with self.lock:
                pending = self.failures.get(method.lower())
                if pending:
                    raise pending.pop(0)
            handler = getattr(self, f"api_{method.lower()}", None)
            if handler is None:
                raise Refused(404, "Not Found")
            with self.lock:
                status, body = 200, {"ok": True, "result": handler(self.bots[token], params)}
            if method.lower() in ("setwebhook", "deletewebhook"):
                body["description"] = "Webhook was " + ("set" if method[0] == "s" else "deleted")
        except Refused as refused:
            status = refused.status
            body = {"ok": False, "error_code": refused.status, "description": refused.description}
            if refused.parameters:
                body["parameters"] = refused.parameters
        data = json.dumps(body).encode()
        http.send_response(status)
        http.send_header("Content-Type", "application/json")
        http.send_header("Content-Length", str(len(data)))
        http.end_headers()
        http.wfile.write(data)

    # ---- what tests set up and look at ----------------------------------------------------------

    def add_bot(self, token: str, username: str = "agntchat_test_bot", bot_id: int | None = None):
        bot_id = bot_id or int(token.split(":")[0])
        self.bots[token] = BotAccount(bot_id, username, username.replace("_", " ").title())
        return self.bots[token]

    def add_chat(self, chat_id: int, *, title: str = "", private_of: dict | None = None) -> dict:
        """A group (TITLE) or a private chat with a person (PRIVATE_OF: id, first_name …)."""
        if private_of:
            chat = {"id": chat_id, "type": "private", **private_of}
        else:
            chat = {"id": chat_id, "type": "group", "title": title}
        self.chats[chat_id] = chat
        return chat

    def fail(
        self,
        method: str,
        status: int = 500,
        description: str = "Internal Server Error",
        times: int = 1,
        **parameters,
    ) -> None:
        """The next TIMES calls of METHOD are refused with STATUS."""
        self.failures.setdefault(method.lower(), []).extend(
            Refused(status, description, **parameters) for _ in range(times)
        )

    def say(self, token: str, chat_id: int, sender: dict, text: str) -> dict:
        """SENDER (id, first_name, last_name?, username?) writes TEXT in the chat, which the bot
        is in: an update for the bot (handed out by getUpdates, or to post to the webhook)."""
        message = {
            "message_id": next(self.message_ids),
            "from": {"is_bot": False, **sender},
            "chat": self.chats[chat_id],
            "date": int(time.time()),
            "text": text,
        }
        if text.startswith("/"):
            command = text.split()[0]
            message["entities"] = [{"type": "bot_command", "offset": 0, "length": len(command)}]
        update = {"update_id": next(self.update_ids), "message": message}
        with self.lock:
            self.bots[token].updates.append(update)
            self.arrived.notify_all()
        return update

    def webhook_request(self, token: str, update: dict) -> tuple[str, bytes, dict]:
        """What Telegram would POST for UPDATE: (url, body, headers with the secret)."""
        bot = self.bots[token]
        assert bot.webhook_url, "no webhook is set"
        headers = {"Content-Type": "application/json"}
        if bot.webhook_secret:
            headers["X-Telegram-Bot-Api-Secret-Token"] = bot.webhook_secret
        return bot.webhook_url, json.dumps(update).encode(), headers

    def sent(self, token: str, chat_id: int | None = None) -> list[dict]:
        return [m for m in self.bots[token].sent if chat_id is None or m["chat"]["id"] == chat_id]

    def calls_of(self, method: str) -> list[Seen]:
        return [c for c in self.calls if c.method.lower() == method.lower()]

    # ---- the Bot API ----------------------------------------------------------------------------

    def api_getme(self, bot: BotAccount, params) -> dict:
        return {
            "id": bot.id,
            "is_bot": True,
            "first_name": bot.first_name,
            "username": bot.username,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    def api_sendmessage(self, bot: BotAccount, params) -> dict:
        text = params.get("text") or ""
        if not text.strip():
            raise Refused(400, "Bad Request: message text is empty")
        if utf16_len(text) > 4096:
            raise Refused(400, "Bad Request: message is too long")
        try:
            chat = self.chats[int(params.get("chat_id"))]
        except (KeyError, TypeError, ValueError):
            raise Refused(400, "Bad Request: chat not found") from None
        message = {
            "message_id": next(self.message_ids),
            "from": {**self.api_getme(bot, {}), "is_bot": True},
            "chat": chat,
            "date": int(time.time()),
            "text": text,
        }
        bot.sent.append(message)
        return message

    def _own_message(self, bot: BotAccount, params, missing: str) -> dict:
        """The bot's message named by chat_id and message_id, or Telegram's 400."""
        try:
            chat_id, message_id = int(params.get("chat_id")), int(params.get("message_id"))
        except (TypeError, ValueError):
            raise Refused(400, f"Bad Request: {missing}") from None
        for message in bot.sent:
            if (message["chat"]["id"], message["message_id"]) == (chat_id, message_id):
                return message
        raise Refused(400, f"Bad Request: {missing}")

    def api_editmessagetext(self, bot: BotAccount, params) -> dict:
        message = self._own_message(bot, params, "message to edit not found")
        text = params.get("text") or ""
        if not text.strip():
            raise Refused(400, "Bad Request: message text is empty")
        if utf16_len(text) > 4096:
            raise Refused(400, "Bad Request: MESSAGE_TOO_LONG")
        if text == message["text"]:
            raise Refused(
                400,
                "Bad Request: message is not modified: specified new message content and reply "
                "markup are exactly the same as a current content and reply markup of the message",
            )
        message.update(text=text, edit_date=int(time.time()))
        return message

    def api_deletemessage(self, bot: BotAccount, params) -> bool:
        message = self._own_message(bot, params, "message to delete not found")
        bot.sent.remove(message)
        return True

    def api_setwebhook(self, bot: BotAccount, params) -> bool:
        url = params.get("url") or ""
        if not url.startswith("https://"):
            raise Refused(
                400, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook"
            )
        secret = params.get("secret_token") or ""
        if secret and not all(c.isalnum() or c in "_-" for c in secret) or len(secret) > 256:
            raise Refused(400, "Bad Request: secret token contains unallowed characters")
        bot.webhook_url, bot.webhook_secret = url, secret
        return True

    def api_deletewebhook(self, bot: BotAccount, params) -> bool:
        bot.webhook_url, bot.webhook_secret = "", ""
        return True

    def api_getwebhookinfo(self, bot: BotAccount, params) -> dict:
        return {
            "url": bot.webhook_url,
            "has_custom_certificate": False,
            "pending_update_count": len(bot.updates),
        }

    def api_getupdates(self, bot: BotAccount, params) -> list[dict]:
        if bot.webhook_url:
            raise Refused(
                409,
                "Conflict: can't use getUpdates method while webhook is active; "
                "use deleteWebhook to delete the webhook first",
            )
        offset = int(params.get("offset") or 0)
        timeout = float(params.get("timeout") or 0)
        deadline = time.monotonic() + timeout
        with self.arrived:
            if offset:
                # Telegram forgets the updates an offset confirms.
                bot.updates = [u for u in bot.updates if u["update_id"] >= offset]
            while not bot.updates and time.monotonic() < deadline:
                self.arrived.wait(deadline - time.monotonic())
            return list(bot.updates[:100])
