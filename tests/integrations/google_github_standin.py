"""Local stand-ins for Google's and GitHub's REST APIs: real HTTP servers (in a thread of the
test process) that answer the endpoints our tools use with the providers' JSON shapes, status
codes and error bodies, keep their state in memory, check the bearer token and record every
request. The tools are pointed at them with ``GOOGLE_API_BASE`` / ``GITHUB_API_BASE``.

Google: Gmail v1 (messages list/get/send, drafts create/update/send), Calendar v3 (events list,
insert, patch), Drive v3 (files list/get/media/export), Docs v1 (get, create, batchUpdate with
insertText / deleteContentRange), Sheets v4 (get, values get/update).
GitHub: repos, contents, pulls (list, create, merge), git refs, commits, blobs, trees.
"""

import base64
import hashlib
import itertools
import json
import re
import shlex
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email import message_from_bytes
from email.message import EmailMessage
from email.policy import default as default_policy
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from django.utils import timezone

from agntchat.core import crypto
from integrations.models import Connection
from tests.standin_server import LocalServer


@dataclass
class Seen:
    """One request the stand-in received."""

    method: str
    path: str  # decoded
    query: dict[str, list[str]]
    token: str
    headers: dict[str, str]
    body: Any


class Problem(Exception):
    """An error answer: STATUS with the provider's JSON BODY."""

    def __init__(self, status: int, body, headers: dict | None = None):
        super().__init__(status)
        self.status, self.body, self.headers = status, body, headers or {}


@dataclass
class Raw:
    """A non-JSON answer (a file's bytes)."""

    data: bytes
    content_type: str = "application/octet-stream"
    headers: dict = field(default_factory=dict)


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    account: str
    args: dict[str, str]
    headers: dict = field(default_factory=dict)

    def param(self, name: str, default: str = "") -> str:
        return self.query.get(name, [default])[0]


class Standin(LocalServer):
    """A threaded HTTP server routing (method, path pattern) to a method of the subclass, under
    one lock; tokens map to accounts (``add_token``)."""

    ROUTES: list[tuple[str, str, str]] = []

    def __init__(self):
        self.tokens: dict[str, str] = {}
        self.requests: list[Seen] = []
        self.lock = threading.RLock()
        self.ids = itertools.count(1)
        self.routes = [(m, re.compile(p + r"\Z"), getattr(self, h)) for m, p, h in self.ROUTES]

    def add_token(self, token: str, account: str) -> None:
        self.tokens[token] = account

    def new_id(self, prefix: str = "") -> str:
        return f"{prefix}{next(self.ids):08x}"

    def tokens_seen(self) -> list[str]:
        return [r.token for r in self.requests]

    def unauthorized(self) -> Problem:
        raise NotImplementedError

    def not_found(self) -> Problem:
        raise NotImplementedError

    def answer(self, http: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(http.path)
        length = int(http.headers.get("Content-Length") or 0)
        raw = http.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        auth = http.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else ""
        path = unquote(parts.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        headers: dict[str, str] = {}
        with self.lock:
            self.requests.append(
                Seen(http.command, path, query, token, dict(http.headers.items()), body)
            )
            try:
                if token not in self.tokens:
                    raise self.unauthorized()
                status, out = self.route(
                    http.command, parts.path, query, body, token, dict(http.headers.items())
                )
            except Problem as problem:
                status, out, headers = problem.status, problem.body, problem.headers
        if isinstance(out, Raw):
            data, kind, headers = out.data, out.content_type, out.headers
        else:
            data = b"" if out is None else json.dumps(out).encode()
            kind = "application/json; charset=UTF-8"
        http.send_response(status)
        http.send_header("Content-Type", kind)
        http.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            http.send_header(name, value)
        http.end_headers()
        http.wfile.write(data)

    def route(self, method, raw_path, query, body, token, headers=None):
        for route_method, pattern, handler in self.routes:
            # Matched on the raw path: an encoded "/" inside an id stays part of that id.
            found = pattern.match(raw_path)
            if found and route_method == method:
                args = {k: unquote(v) for k, v in found.groupdict().items()}
                account = self.tokens[token]
                return handler(Request(method, raw_path, query, body, account, args, headers or {}))
        raise self.not_found()


def now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ---- Google ------------------------------------------------------------------------------

DOC = "application/vnd.google-apps.document"
SHEET = "application/vnd.google-apps.spreadsheet"


def google_error(status: int, message: str, reason: str = "") -> Problem:
    names = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
             404: "NOT_FOUND"}  # fmt: skip
    error = {"code": status, "message": message, "status": names.get(status, "UNKNOWN")}
    error["errors"] = [{"message": message, "domain": "global", "reason": reason or "invalid"}]
    return Problem(status, {"error": error})


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode()


def from_b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Mailbox:
    messages: dict = field(default_factory=dict)  # id → {"id", "threadId", "labelIds", "raw"}
    drafts: dict = field(default_factory=dict)  # draft id → message id
    calendars: dict = field(default_factory=lambda: {"primary": {}})  # id → {event id: event}
    files: dict = field(default_factory=dict)  # id → metadata + "content" (bytes)
    docs: dict = field(default_factory=dict)  # id → the body's text (ends with "\n")
    sheets: dict = field(default_factory=dict)  # id → {sheet title: {(row, col): value}}


def mime_payload(part, part_id: str = "") -> dict:
    """An email part as Gmail's format=full shows it."""
    out = {
        "partId": part_id,
        "mimeType": part.get_content_type(),
        "filename": part.get_filename() or "",
        "headers": [{"name": k, "value": str(v)} for k, v in part.items()],
    }
    if part.is_multipart():
        out["body"] = {"size": 0}
        prefix = f"{part_id}." if part_id else ""
        out["parts"] = [mime_payload(p, f"{prefix}{i}") for i, p in enumerate(part.get_payload())]
    else:
        data = part.get_payload(decode=True) or b""
        if out["filename"]:
            out["body"] = {"size": len(data), "attachmentId": "att-" + part_id}
        else:
            out["body"] = {"size": len(data), "data": b64url(data)}
    return out


def plain_text(email) -> str:
    """The text/plain body of a parsed email, lines ending as in Python (not CRLF as sent)."""
    found = email.get_body(preferencelist=("plain",))
    return found.get_content().replace("\r\n", "\n") if found is not None else ""


def event_time(value: dict) -> datetime:
    if "dateTime" in value:
        return parse_time(value["dateTime"])
    return datetime.fromisoformat(value["date"]).replace(tzinfo=UTC)


def parse_time(text: str) -> datetime:
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        raise google_error(400, "Bad Request") from None
    if found.tzinfo is None:  # Calendar wants an offset in timeMin/timeMax and date-times
        raise google_error(400, "Bad Request")
    return found


def column_number(letters: str) -> int:
    number = 0
    for letter in letters:
        number = number * 26 + ord(letter) - 64
    return number - 1


def column_letters(number: int) -> str:
    letters = ""
    number += 1
    while number:
        number, rest = divmod(number - 1, 26)
        letters = chr(65 + rest) + letters
    return letters


CELL = re.compile(r"^([A-Z]*)(\d*)$")


class GoogleStandin(Standin):
    ROUTES = [
        ("GET", r"/gmail/v1/users/me/messages", "messages_list"),
        ("GET", r"/gmail/v1/users/me/messages/(?P<id>[^/]+)", "messages_get"),
        ("POST", r"/gmail/v1/users/me/messages/send", "messages_send"),
        ("POST", r"/gmail/v1/users/me/drafts", "drafts_create"),
        ("POST", r"/gmail/v1/users/me/drafts/send", "drafts_send"),
        ("PUT", r"/gmail/v1/users/me/drafts/(?P<id>[^/]+)", "drafts_update"),
        ("GET", r"/calendar/v3/calendars/(?P<cal>[^/]+)/events", "events_list"),
        ("POST", r"/calendar/v3/calendars/(?P<cal>[^/]+)/events", "events_insert"),
        ("PATCH", r"/calendar/v3/calendars/(?P<cal>[^/]+)/events/(?P<id>[^/]+)", "events_patch"),
        ("GET", r"/drive/v3/files", "files_list"),
        ("GET", r"/drive/v3/files/(?P<id>[^/]+)", "files_get"),
        ("GET", r"/drive/v3/files/(?P<id>[^/]+)/export", "files_export"),
        ("GET", r"/v1/documents/(?P<id>[^/:]+)", "documents_get"),
        ("POST", r"/v1/documents", "documents_create"),
        ("POST", r"/v1/documents/(?P<id>[^/:]+):batchUpdate", "documents_batch_update"),
        ("GET", r"/v4/spreadsheets/(?P<id>[^/]+)", "spreadsheets_get"),
        ("GET", r"/v4/spreadsheets/(?P<id>[^/]+)/values/(?P<range>[^/]+)", "values_get"),
        ("PUT", r"/v4/spreadsheets/(?P<id>[^/]+)/values/(?P<range>[^/]+)", "values_update"),
    ]

    def __init__(self):
        super().__init__()
        self.accounts: dict[str, Mailbox] = {}

    def add_token(self, token: str, account: str) -> None:
        super().add_token(token, account)
        self.accounts.setdefault(account, Mailbox())

    def box(self, account: str) -> Mailbox:
        return self.accounts.setdefault(account, Mailbox())

    def unauthorized(self) -> Problem:
        return google_error(
            401,
            "Request had invalid authentication credentials. Expected OAuth 2 access token, "
            "login cookie or other valid authentication credential.",
            "authError",
        )

    def not_found(self) -> Problem:
        return google_error(404, "Not Found", "notFound")

    # -- test helpers (state as the provider holds it) --

    def add_message(self, account, *, sender, to, subject, text, html=None, labels=("INBOX",),
                    attachment=None) -> str:  # fmt: skip
        email = EmailMessage()
        email["From"], email["To"], email["Subject"] = sender, to, subject
        email["Date"] = "Mon, 02 Mar 2026 09:00:00 +0000"
        email.set_content(text)
        if html is not None:
            email.add_alternative(html, subtype="html")
        if attachment is not None:
            email.add_attachment(attachment[1].encode(), maintype="text", subtype="csv",
                                 filename=attachment[0])  # fmt: skip
        with self.lock:
            return self._store(self.box(account), email.as_bytes(), list(labels), "")["id"]

    def draft_email(self, account: str, draft_id: str):
        box = self.box(account)
        return message_from_bytes(box.messages[box.drafts[draft_id]]["raw"], policy=default_policy)

    def sent(self, account: str) -> list:
        return [
            message_from_bytes(m["raw"], policy=default_policy)
            for m in self.box(account).messages.values()
            if "SENT" in m["labelIds"]
        ]

    def add_event(self, account, summary, start, end, calendar="primary") -> str:
        with self.lock:
            event = self._new_event(
                account, {"summary": summary, "start": start, "end": end}, calendar
            )
            return event["id"]

    def add_file(self, account, name, mime_type, content=b"") -> str:
        with self.lock:
            file_id = self.new_id("f")
            self.box(account).files[file_id] = {
                "id": file_id, "name": name, "mimeType": mime_type, "modifiedTime": now_text(),
                "webViewLink": f"https://drive.google.com/file/d/{file_id}/view", "content": content,
            }  # fmt: skip
            return file_id

    def add_doc(self, account, name, text) -> str:
        file_id = self.add_file(account, name, DOC)
        self.box(account).docs[file_id] = text + "\n"
        return file_id

    def add_sheet(self, account, name, sheets: dict) -> str:
        """SHEETS: {title: rows of values}."""
        file_id = self.add_file(account, name, SHEET)
        self.box(account).sheets[file_id] = {
            title: {(r, c): v for r, row in enumerate(rows) for c, v in enumerate(row)}
            for title, rows in sheets.items()
        }
        return file_id

    # -- Gmail --

    def _store(self, box: Mailbox, raw: bytes, labels: list, thread_id: str) -> dict:
        message_id = self.new_id("18c")
        box.messages[message_id] = {
            "id": message_id, "threadId": thread_id or message_id, "labelIds": labels, "raw": raw,
        }  # fmt: skip
        return box.messages[message_id]

    def _raw(self, body) -> bytes:
        try:
            raw = from_b64url(body["raw"])
        except (KeyError, TypeError, ValueError):
            raise google_error(400, "Invalid value at 'message.raw' (TYPE_BYTES)") from None
        email = message_from_bytes(raw, policy=default_policy)
        if not email["To"] and not email["Cc"] and not email["Bcc"]:
            raise google_error(400, "Invalid To header", "invalidArgument")
        return raw

    def _matches(self, message: dict, q: str) -> bool:
        email = message_from_bytes(message["raw"], policy=default_policy)
        for term in shlex.split(q.lower()):
            key, colon, value = term.partition(":")
            if colon and key in ("from", "to", "subject"):
                if value not in str(email[key] or "").lower():
                    return False
            elif colon and key == "is":
                if value.upper() not in message["labelIds"]:
                    return False
            elif colon and key == "in":
                if value.upper() not in message["labelIds"]:
                    return False
            elif colon and key in ("newer_than", "older_than", "after", "before"):
                continue
            elif term not in f"{email['subject']} {email['from']} {plain_text(email)}".lower():
                return False
        return True

    def messages_list(self, r: Request):
        box = self.box(r.account)
        found = [m for m in reversed(box.messages.values()) if self._matches(m, r.param("q"))]
        found = found[: int(r.param("maxResults", "100"))]
        out = {"resultSizeEstimate": len(found)}
        if found:
            out["messages"] = [{"id": m["id"], "threadId": m["threadId"]} for m in found]
        return 200, out

    def messages_get(self, r: Request):
        message = self.box(r.account).messages.get(r.args["id"])
        if message is None:
            raise google_error(404, "Requested entity was not found.", "notFound")
        email = message_from_bytes(message["raw"], policy=default_policy)
        out = {
            "id": message["id"], "threadId": message["threadId"],
            "labelIds": message["labelIds"], "sizeEstimate": len(message["raw"]),
            "snippet": " ".join(plain_text(email).split())[:100],
            "historyId": "1", "internalDate": "1772442000000",
        }  # fmt: skip
        kind = r.param("format", "full")
        if kind == "raw":
            out["raw"] = b64url(message["raw"])
        elif kind == "metadata":
            wanted = {h.lower() for h in r.query.get("metadataHeaders", [])}
            out["payload"] = {
                "mimeType": email.get_content_type(),
                "headers": [
                    {"name": k, "value": str(v)}
                    for k, v in email.items()
                    if not wanted or k.lower() in wanted
                ],
            }
        elif kind == "full":
            out["payload"] = mime_payload(email)
        return 200, out

    def _message_out(self, message: dict) -> dict:
        return {k: message[k] for k in ("id", "threadId", "labelIds")}

    def messages_send(self, r: Request):
        box = self.box(r.account)
        raw = self._raw(r.body or {})
        return 200, self._message_out(self._store(box, raw, ["SENT"], r.body.get("threadId", "")))

    def drafts_create(self, r: Request):
        box = self.box(r.account)
        given = (r.body or {}).get("message") or {}
        message = self._store(box, self._raw(given), ["DRAFT"], given.get("threadId", ""))
        draft_id = self.new_id("r-")
        box.drafts[draft_id] = message["id"]
        return 200, {"id": draft_id, "message": self._message_out(message)}

    def drafts_update(self, r: Request):
        box, draft_id = self.box(r.account), r.args["id"]
        if draft_id not in box.drafts:
            raise google_error(404, "Requested entity was not found.", "notFound")
        given = (r.body or {}).get("message") or {}
        old = box.messages.pop(box.drafts[draft_id])
        message = self._store(
            box, self._raw(given), ["DRAFT"], given.get("threadId", old["threadId"])
        )
        box.drafts[draft_id] = message["id"]
        return 200, {"id": draft_id, "message": self._message_out(message)}

    def drafts_send(self, r: Request):
        box = self.box(r.account)
        message_id = box.drafts.pop((r.body or {}).get("id", ""), None)
        if message_id is None:
            raise google_error(404, "Requested entity was not found.", "notFound")
        message = box.messages[message_id]
        message["labelIds"] = ["SENT"]
        return 200, self._message_out(message)

    # -- Calendar --

    def _calendar(self, r: Request) -> dict:
        found = self.box(r.account).calendars.get(r.args["cal"])
        if found is None:
            raise self.not_found()
        return found

    def _new_event(self, account: str, body: dict, calendar: str) -> dict:
        if "start" not in body or "end" not in body:
            raise google_error(400, "Missing end time." if "start" in body else "Bad Request")
        start, end = event_time(body["start"]), event_time(body["end"])
        if end < start:
            raise google_error(400, "The specified time range is empty.", "timeRangeEmpty")
        event_id = self.new_id("ev")
        event = {
            "kind": "calendar#event", "id": event_id, "status": "confirmed",
            "htmlLink": f"https://www.google.com/calendar/event?eid={event_id}",
            "created": now_text(), "updated": now_text(),
            "creator": {"email": account, "self": True},
            "organizer": {"email": account, "self": True},
            **body,
        }  # fmt: skip
        if "attendees" in body:
            event["attendees"] = [{**a, "responseStatus": "needsAction"} for a in body["attendees"]]
        self.box(account).calendars[calendar][event_id] = event
        return event

    def events_list(self, r: Request):
        events = self._calendar(r)
        low = parse_time(r.param("timeMin")) if r.param("timeMin") else None
        high = parse_time(r.param("timeMax")) if r.param("timeMax") else None
        found = [
            e for e in events.values()
            if (low is None or event_time(e["end"]) > low)
            and (high is None or event_time(e["start"]) < high)
            and r.param("q").lower() in e.get("summary", "").lower()
        ]  # fmt: skip
        found.sort(key=lambda e: event_time(e["start"]))
        found = found[: int(r.param("maxResults", "250"))]
        return 200, {"kind": "calendar#events", "summary": r.args["cal"], "items": found}

    def events_insert(self, r: Request):
        self._calendar(r)
        return 200, self._new_event(r.account, dict(r.body or {}), r.args["cal"])

    def events_patch(self, r: Request):
        event = self._calendar(r).get(r.args["id"])
        if event is None:
            raise self.not_found()
        for key in ("start", "end"):
            if key in (r.body or {}):
                event_time(r.body[key])
        event.update(r.body or {})
        event["updated"] = now_text()
        return 200, event

    # -- Drive, Docs, Sheets --

    def _file(self, r: Request) -> dict:
        found = self.box(r.account).files.get(r.args["id"])
        if found is None:
            raise google_error(404, f"File not found: {r.args['id']}.", "notFound")
        return found

    def _meta(self, found: dict) -> dict:
        return {"kind": "drive#file", **{k: v for k, v in found.items() if k != "content"}}

    CLAUSE = re.compile(r"^(\w+)\s*(contains|=|!=)\s*(?:'((?:[^'\\]|\\.)*)'|(true|false))$")

    def files_list(self, r: Request):
        clauses = [c.strip().strip("()").strip() for c in r.param("q").split(" and ") if c.strip()]
        found = list(self.box(r.account).files.values())
        for clause in clauses:
            match = self.CLAUSE.match(clause)
            if match is None or match[1] not in ("name", "mimeType", "trashed", "fullText"):
                raise google_error(400, "Invalid Value", "invalid")
            key, op, value = match[1], match[2], match[3] if match[3] is not None else match[4]
            if key == "trashed":
                continue  # nothing here is in the trash
            if key == "fullText":
                key = "name"
            if op == "contains":
                found = [f for f in found if value.lower() in f[key].lower()]
            elif op == "=":
                found = [f for f in found if f[key] == value]
            else:
                found = [f for f in found if f[key] != value]
        found.sort(key=lambda f: f["modifiedTime"], reverse=True)
        found = found[: int(r.param("pageSize", "100"))]
        return 200, {"kind": "drive#fileList", "files": [self._meta(f) for f in found]}

    def files_get(self, r: Request):
        found = self._file(r)
        if r.param("alt") != "media":
            return 200, self._meta(found)
        if found["mimeType"].startswith("application/vnd.google-apps."):
            raise google_error(
                403,
                "Only files with binary content can be downloaded. Use Export with Docs Editors "
                "files.",
                "fileNotDownloadable",
            )
        # Drive's partial download: "Range: bytes=0-N" answers 206 with the first N+1 bytes.
        wanted = re.fullmatch(r"bytes=0-(\d+)", r.headers.get("Range", ""))
        content = found["content"]
        if wanted and not content:  # RFC 9110: no byte 0 to send
            raise Problem(416, {"error": {"code": 416, "message": "Range Not Satisfiable"}})
        if wanted and int(wanted[1]) + 1 < len(content):
            end = int(wanted[1])
            return 206, Raw(
                content[: end + 1],
                found["mimeType"],
                {"Content-Range": f"bytes 0-{end}/{len(content)}"},
            )
        return 200, Raw(content, found["mimeType"])

    def files_export(self, r: Request):
        found = self._file(r)
        if found["mimeType"] == DOC and r.param("mimeType") == "text/plain":
            return 200, Raw(self.box(r.account).docs[found["id"]].encode(), "text/plain")
        raise google_error(400, "The requested conversion is not supported.", "badRequest")

    def _document(self, r: Request) -> str:
        text = self.box(r.account).docs.get(r.args["id"])
        if text is None:
            raise google_error(404, "Requested entity was not found.")
        return text

    def document_json(self, account: str, document_id: str) -> dict:
        text = self.box(account).docs[document_id]
        content = [{"endIndex": 1, "sectionBreak": {"sectionStyle": {}}}]
        index = 1
        for line in text.splitlines(keepends=True):
            end = index + len(line)
            run = {"startIndex": index, "endIndex": end, "textRun": {"content": line}}
            content.append({"startIndex": index, "endIndex": end,
                            "paragraph": {"elements": [run]}})  # fmt: skip
            index = end
        return {
            "documentId": document_id,
            "title": self.box(account).files[document_id]["name"],
            "body": {"content": content},
            "revisionId": hashlib.sha1(text.encode()).hexdigest()[:12],
        }

    def documents_get(self, r: Request):
        self._document(r)
        return 200, self.document_json(r.account, r.args["id"])

    def documents_create(self, r: Request):
        title = (r.body or {}).get("title") or "Untitled document"
        document_id = self.add_doc(r.account, title, "")
        return 200, self.document_json(r.account, document_id)

    def documents_batch_update(self, r: Request):
        text = self._document(r)
        replies = []
        for i, request in enumerate((r.body or {}).get("requests", [])):
            if "insertText" in request:
                insert = request["insertText"]
                if "endOfSegmentLocation" in insert:
                    at = len(text)  # before the body's final newline (index len(text))
                else:
                    at = insert.get("location", {}).get("index", 0)
                    if not 1 <= at <= len(text):
                        raise google_error(
                            400, f"Invalid requests[{i}].insertText: Index {at} must be less "
                            f"than the end index of the referenced segment, {len(text) + 1}.",
                        )  # fmt: skip
                text = text[: at - 1] + insert["text"] + text[at - 1 :]
            elif "deleteContentRange" in request:
                span = request["deleteContentRange"]["range"]
                start, end = span["startIndex"], span["endIndex"]
                if end > len(text):
                    raise google_error(
                        400, f"Invalid requests[{i}].deleteContentRange: The range cannot "
                        "include the newline character at the end of the segment.",
                    )  # fmt: skip
                if not 1 <= start < end:
                    raise google_error(
                        400, f"Invalid requests[{i}].deleteContentRange: The range should not "
                        "be empty.",
                    )  # fmt: skip
                text = text[: start - 1] + text[end - 1 :]
            else:
                raise google_error(400, f"Invalid requests[{i}]: unknown request.")
            replies.append({})
        self.box(r.account).docs[r.args["id"]] = text
        return 200, {"documentId": r.args["id"], "replies": replies,
                     "writeControl": {"requiredRevisionId": "r2"}}  # fmt: skip

    def _sheets(self, r: Request) -> dict:
        found = self.box(r.account).sheets.get(r.args["id"])
        if found is None:
            raise google_error(404, "Requested entity was not found.")
        return found

    def spreadsheets_get(self, r: Request):
        sheets = self._sheets(r)
        return 200, {
            "spreadsheetId": r.args["id"],
            "properties": {"title": self.box(r.account).files[r.args["id"]]["name"]},
            "sheets": [
                {"properties": {"sheetId": i, "title": title, "index": i}}
                for i, title in enumerate(sheets)
            ],
        }

    def _range(self, sheets: dict, text: str):
        """(title, top, left, bottom, right) of an A1 range; bottom/right None: open."""
        if "!" in text:
            title, cells = text.rsplit("!", 1)
            if title.startswith("'"):
                title = title[1:-1].replace("''", "'")
        elif text.strip("'").replace("''", "'") in sheets:
            title, cells = text.strip("'").replace("''", "'"), ""
        else:
            title, cells = next(iter(sheets)), text
        if title not in sheets:
            raise google_error(400, f"Unable to parse range: {text}")
        corners = cells.split(":") if cells else ["", ""]
        if len(corners) == 1:
            corners = corners * 2
        points = []
        for corner in corners:
            match = CELL.match(corner)
            if match is None:
                raise google_error(400, f"Unable to parse range: {text}")
            points.append((
                int(match[2]) - 1 if match[2] else None,
                column_number(match[1]) if match[1] else None,
            ))  # fmt: skip
        (top, left), (bottom, right) = points
        return title, top or 0, left or 0, bottom, right

    def _label(self, title: str, top, left, bottom, right) -> str:
        name = f"'{title}'" if " " in title else title
        return f"{name}!{column_letters(left)}{top + 1}:{column_letters(right)}{bottom + 1}"

    def values_get(self, r: Request):
        sheets = self._sheets(r)
        title, top, left, bottom, right = self._range(sheets, r.args["range"])
        grid = sheets[title]
        bottom = max([k[0] for k in grid] + [top]) if bottom is None else bottom
        right = max([k[1] for k in grid] + [left]) if right is None else right
        rows = []
        for row in range(top, bottom + 1):
            values = [str(grid.get((row, col), "")) for col in range(left, right + 1)]
            while values and values[-1] == "":
                values.pop()
            rows.append(values)
        while rows and not rows[-1]:
            rows.pop()
        out = {"range": self._label(title, top, left, bottom, right), "majorDimension": "ROWS"}
        if rows:
            out["values"] = rows
        return 200, out

    def values_update(self, r: Request):
        if r.param("valueInputOption") not in ("RAW", "USER_ENTERED"):
            raise google_error(400, "'valueInputOption' is required but not specified")
        sheets = self._sheets(r)
        title, top, left, bottom, right = self._range(sheets, r.args["range"])
        values = (r.body or {}).get("values") or []
        height, width = len(values), max((len(row) for row in values), default=0)
        if (bottom is not None and top + height - 1 > bottom) or (
            right is not None and left + width - 1 > right
        ):
            raise google_error(
                400, f"Requested writing within range [{r.args['range']}], but tried writing "
                "beyond it.",
            )  # fmt: skip
        for i, row in enumerate(values):
            for j, value in enumerate(row):
                if isinstance(value, bool):
                    value = "TRUE" if value else "FALSE"
                sheets[title][(top + i, left + j)] = "" if value is None else value
        return 200, {
            "spreadsheetId": r.args["id"],
            "updatedRange": self._label(title, top, left, top + height - 1, left + width - 1),
            "updatedRows": height,
            "updatedColumns": width,
            "updatedCells": sum(len(row) for row in values),
        }


# ---- GitHub ------------------------------------------------------------------------------

DOCS_URL = "https://docs.github.com/rest"


def github_error(status: int, message: str, errors=None) -> Problem:
    body = {"message": message, "documentation_url": DOCS_URL, "status": str(status)}
    if errors:
        body["errors"] = errors
    return Problem(status, body)


@dataclass
class Repo:
    name: str
    default_branch: str
    collaborators: set
    refs: dict = field(default_factory=dict)  # branch → commit sha
    blobs: dict = field(default_factory=dict)  # sha → bytes
    trees: dict = field(default_factory=dict)  # sha → {path: blob sha} (flat, full paths)
    commits: dict = field(default_factory=dict)  # sha → {"tree", "parents", "message"}
    pulls: list = field(default_factory=list)


def git_sha(kind: str, data: bytes) -> str:
    return hashlib.sha1(f"{kind} {len(data)}\0".encode() + data).hexdigest()


REPO = r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)"


class GitHubStandin(Standin):
    ROUTES = [
        ("GET", REPO, "repo_get"),
        ("GET", REPO + r"/contents/(?P<path>.*)", "contents_get"),
        ("GET", REPO + r"/pulls", "pulls_list"),
        ("POST", REPO + r"/pulls", "pulls_create"),
        ("PUT", REPO + r"/pulls/(?P<number>\d+)/merge", "pulls_merge"),
        ("GET", REPO + r"/git/ref/heads/(?P<branch>.+)", "ref_get"),
        ("POST", REPO + r"/git/refs", "ref_create"),
        ("PATCH", REPO + r"/git/refs/heads/(?P<branch>.+)", "ref_update"),
        ("DELETE", REPO + r"/git/refs/heads/(?P<branch>.+)", "ref_delete"),
        ("GET", REPO + r"/git/commits/(?P<sha>[0-9a-f]+)", "commit_get"),
        ("POST", REPO + r"/git/commits", "commit_create"),
        ("POST", REPO + r"/git/blobs", "blob_create"),
        ("POST", REPO + r"/git/trees", "tree_create"),
    ]

    def __init__(self):
        super().__init__()
        self.repos: dict[str, Repo] = {}

    def unauthorized(self) -> Problem:
        return github_error(401, "Bad credentials")

    def not_found(self) -> Problem:
        return github_error(404, "Not Found")

    # -- test helpers --

    def add_repo(self, name: str, files: dict, *, collaborators=(), default_branch="main") -> Repo:
        repo = Repo(name, default_branch, set(collaborators))
        with self.lock:
            tree = {path: self._blob(repo, text.encode()) for path, text in files.items()}
            repo.refs[default_branch] = self._commit(repo, self._tree(repo, tree), [], "Initial")
            self.repos[name] = repo
        return repo

    def file_at(self, name: str, branch: str, path: str) -> str | None:
        repo = self.repos[name]
        tree = repo.trees[repo.commits[repo.refs[branch]]["tree"]]
        return repo.blobs[tree[path]].decode() if path in tree else None

    def _blob(self, repo: Repo, data: bytes) -> str:
        sha = git_sha("blob", data)
        repo.blobs[sha] = data
        return sha

    def _tree(self, repo: Repo, entries: dict) -> str:
        sha = git_sha("tree", json.dumps(sorted(entries.items())).encode())
        repo.trees[sha] = dict(entries)
        return sha

    def _commit(self, repo: Repo, tree: str, parents: list, message: str) -> str:
        data = json.dumps([tree, parents, message, next(self.ids)]).encode()
        sha = git_sha("commit", data)
        repo.commits[sha] = {"tree": tree, "parents": parents, "message": message}
        return sha

    def _repo(self, r: Request) -> Repo:
        repo = self.repos.get(f"{r.args['owner']}/{r.args['repo']}")
        # A private repository the account cannot see answers 404, as GitHub does.
        if repo is None or r.account not in repo.collaborators:
            raise self.not_found()
        return repo

    def _ancestors(self, repo: Repo, sha: str) -> set:
        seen, todo = set(), [sha]
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo += repo.commits[current]["parents"]
        return seen

    def _ref_out(self, repo: Repo, branch: str) -> dict:
        return {"ref": f"refs/heads/{branch}", "node_id": "REF_" + branch,
                "url": f"{self.url}/repos/{repo.name}/git/refs/heads/{branch}",
                "object": {"sha": repo.refs[branch], "type": "commit"}}  # fmt: skip

    def repo_get(self, r: Request):
        repo = self._repo(r)
        owner = repo.name.split("/")[0]
        return 200, {"id": 1, "name": repo.name.split("/")[1], "full_name": repo.name,
                     "private": True, "owner": {"login": owner},
                     "default_branch": repo.default_branch}  # fmt: skip

    def contents_get(self, r: Request):
        repo = self._repo(r)
        ref = r.param("ref", repo.default_branch)
        sha = repo.refs.get(ref) or (ref if ref in repo.commits else None)
        if sha is None:
            raise github_error(404, f"No commit found for the ref {ref}")
        tree, path = repo.trees[repo.commits[sha]["tree"]], r.args["path"].strip("/")
        if path in tree:
            data = repo.blobs[tree[path]]
            encoded = base64.b64encode(data).decode()
            lines = "\n".join(encoded[i : i + 60] for i in range(0, len(encoded), 60)) + "\n"
            return 200, {"type": "file", "encoding": "base64", "size": len(data),
                         "name": path.rsplit("/", 1)[-1], "path": path, "sha": tree[path],
                         "content": lines}  # fmt: skip
        prefix = f"{path}/" if path else ""
        entries = {}
        for full in tree:
            if full.startswith(prefix):
                rest = full[len(prefix) :]
                name, slash, _ = rest.partition("/")
                entries[name] = "dir" if slash else "file"
        if not entries:
            raise self.not_found()
        return 200, [{"name": n, "path": prefix + n, "type": t} for n, t in sorted(entries.items())]

    def _pull_out(self, repo: Repo, pull: dict) -> dict:
        return {
            **{k: v for k, v in pull.items() if k not in ("head", "base")},
            "html_url": f"https://github.com/{repo.name}/pull/{pull['number']}",
            "head": {"ref": pull["head"], "sha": repo.refs.get(pull["head"], "")},
            "base": {"ref": pull["base"], "sha": repo.refs.get(pull["base"], "")},
        }

    def pulls_list(self, r: Request):
        repo, state = self._repo(r), r.param("state", "open")
        found = [p for p in reversed(repo.pulls) if state == "all" or p["state"] == state]
        return 200, [self._pull_out(repo, p) for p in found[: int(r.param("per_page", "30"))]]

    def pulls_create(self, r: Request):
        repo, body = self._repo(r), r.body or {}
        for key in ("head", "base"):
            if body.get(key) not in repo.refs:
                raise github_error(422, "Validation Failed", [
                    {"resource": "PullRequest", "field": key, "code": "invalid"}
                ])  # fmt: skip
        head, base = body["head"], body["base"]
        if repo.refs[head] in self._ancestors(repo, repo.refs[base]):
            raise github_error(422, "Validation Failed", [
                {"resource": "PullRequest", "code": "custom",
                 "message": f"No commits between {base} and {head}"}
            ])  # fmt: skip
        if any(
            p["head"] == head and p["base"] == base and p["state"] == "open" for p in repo.pulls
        ):
            raise github_error(422, "Validation Failed", [
                {"resource": "PullRequest", "code": "custom",
                 "message": f"A pull request already exists for {repo.name.split('/')[0]}:{head}."}
            ])  # fmt: skip
        pull = {
            "number": len(repo.pulls) + 1, "state": "open", "title": body.get("title", ""),
            "body": body.get("body") or "", "draft": bool(body.get("draft")),
            "user": {"login": r.account}, "head": head, "base": base, "merged": False,
            "updated_at": now_text(),
        }  # fmt: skip
        repo.pulls.append(pull)
        return 201, self._pull_out(repo, pull)

    def pulls_merge(self, r: Request):
        repo = self._repo(r)
        number = int(r.args["number"])
        if not 1 <= number <= len(repo.pulls):
            raise self.not_found()
        pull = repo.pulls[number - 1]
        if pull["state"] != "open":
            raise github_error(405, "Pull Request is not mergeable")
        method = (r.body or {}).get("merge_method", "merge")
        head, base = repo.refs[pull["head"]], repo.refs[pull["base"]]
        title = (r.body or {}).get("commit_title") or f"Merge pull request #{number}"
        parents = [base, head] if method == "merge" else [base]
        sha = self._commit(repo, repo.commits[head]["tree"], parents, title)
        repo.refs[pull["base"]] = sha
        pull.update(state="closed", merged=True, merge_method=method, updated_at=now_text())
        return 200, {"sha": sha, "merged": True, "message": "Pull Request successfully merged"}

    def ref_get(self, r: Request):
        repo = self._repo(r)
        if r.args["branch"] not in repo.refs:
            raise self.not_found()
        return 200, self._ref_out(repo, r.args["branch"])

    def ref_create(self, r: Request):
        repo, body = self._repo(r), r.body or {}
        ref = body.get("ref", "")
        if not ref.startswith("refs/") or ref.count("/") < 2:
            raise github_error(422, "Reference name must start with 'refs/' and have at least "
                               "two slashes.")  # fmt: skip
        branch = ref.removeprefix("refs/heads/")
        if branch in repo.refs:
            raise github_error(422, "Reference already exists")
        if body.get("sha") not in repo.commits:
            raise github_error(422, "Object does not exist")
        repo.refs[branch] = body["sha"]
        return 201, self._ref_out(repo, branch)

    def ref_update(self, r: Request):
        repo, branch, body = self._repo(r), r.args["branch"], r.body or {}
        if branch not in repo.refs:
            raise github_error(422, "Reference does not exist")
        if body.get("sha") not in repo.commits:
            raise github_error(422, "Object does not exist")
        if not body.get("force") and repo.refs[branch] not in self._ancestors(repo, body["sha"]):
            raise github_error(422, "Update is not a fast forward")
        repo.refs[branch] = body["sha"]
        return 200, self._ref_out(repo, branch)

    def ref_delete(self, r: Request):
        repo, branch = self._repo(r), r.args["branch"]
        if branch not in repo.refs:
            raise github_error(422, "Reference does not exist")
        del repo.refs[branch]
        return 204, None

    def commit_get(self, r: Request):
        repo, sha = self._repo(r), r.args["sha"]
        if sha not in repo.commits:
            raise self.not_found()
        commit = repo.commits[sha]
        return 200, {"sha": sha, "message": commit["message"], "tree": {"sha": commit["tree"]},
                     "parents": [{"sha": p} for p in commit["parents"]]}  # fmt: skip

    def commit_create(self, r: Request):
        repo, body = self._repo(r), r.body or {}
        if body.get("tree") not in repo.trees or any(
            p not in repo.commits for p in body.get("parents", [])
        ):
            raise github_error(422, "Tree SHA does not exist")
        sha = self._commit(repo, body["tree"], list(body.get("parents", [])), body["message"])
        return 201, {"sha": sha, "html_url": f"https://github.com/{repo.name}/commit/{sha}",
                     "message": body["message"], "tree": {"sha": body["tree"]},
                     "parents": [{"sha": p} for p in body.get("parents", [])]}  # fmt: skip

    def blob_create(self, r: Request):
        repo, body = self._repo(r), r.body or {}
        if body.get("encoding", "utf-8") == "base64":
            data = base64.b64decode(body["content"])
        else:
            data = body["content"].encode()
        return 201, {"sha": self._blob(repo, data), "url": ""}

    def tree_create(self, r: Request):
        repo, body = self._repo(r), r.body or {}
        entries = dict(repo.trees.get(body.get("base_tree"), {}))
        if body.get("base_tree") and body["base_tree"] not in repo.trees:
            raise github_error(422, "base_tree is not a valid tree oid")
        for entry in body.get("tree", []):
            if entry.get("type") != "blob" or entry.get("mode") not in ("100644", "100755"):
                raise github_error(422, "Invalid tree info")
            if "content" in entry:
                entries[entry["path"]] = self._blob(repo, entry["content"].encode())
            elif entry.get("sha") is None:
                if entry["path"] not in entries:
                    raise github_error(422, f"tree.path {entry['path']} does not exist")
                del entries[entry["path"]]
            elif entry["sha"] in repo.blobs:
                entries[entry["path"]] = entry["sha"]
            else:
                raise github_error(422, f"tree.sha {entry['sha']} is not a valid blob")
        sha = self._tree(repo, entries)
        return 201, {"sha": sha, "tree": [{"path": p, "type": "blob", "sha": s}
                                          for p, s in sorted(entries.items())]}  # fmt: skip


# ---- connections, as the OAuth flow would leave them ------------------------------------


def connect(provider: str, token: str, account: str, *, user=None, workspace=None):
    """A Connection row for PROVIDER whose access token is TOKEN, owned by USER or WORKSPACE."""
    return Connection.objects.create(
        provider=provider,
        user=user,
        workspace=workspace,
        account=account,
        access_ciphertext=crypto.encrypt(token),
        expires_at=timezone.now() + timedelta(days=365),
    )
