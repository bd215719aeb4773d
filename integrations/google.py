"""The Google tools (INT-2): Gmail, Calendar, Drive, Docs and Sheets, through their public REST
APIs, as the Google account the call resolves to (``connections.account_for``: the workspace's,
else the requesting person's). Not platform tools: an owner grants them to an agent.

Reading is READ; anything that writes to the account or reaches other people is EXTERNAL, so it
asks a person first unless a standing permission says otherwise.

Also the mailbox behind the email-draft card's Send / Save draft buttons (``artifacts.mailbox``).
"""

import base64
import binascii
from email.message import EmailMessage
from email.policy import SMTP
from urllib.parse import quote

import httpx
from django.conf import settings
from django.utils import timezone

from agntchat.core.exceptions import AppError, NotFound
from artifacts.mailbox import Email, set_mailbox
from conversations.models import Message
from integrations.connections import (
    NotConnected,
    account_for,
    api_request,
    connection_for,
    retry_note,
)
from integrations.models import Connection
from work.models import Risk
from work.tools.platform_web import TextOfPage
from work.tools.registry import ToolContext, tool

# Each API's host; GOOGLE_API_BASE, when set, stands for all of them (a local stand-in).
HOSTS = {
    "gmail": "https://gmail.googleapis.com",
    "calendar": "https://www.googleapis.com",
    "drive": "https://www.googleapis.com",
    "docs": "https://docs.googleapis.com",
    "sheets": "https://sheets.googleapis.com",
}
MAX_TEXT = 20_000  # characters of a message, document or file the model is given
MAX_BYTES = 4 * MAX_TEXT  # of a file downloaded: MAX_TEXT characters of UTF-8 at most
MAX_CELLS = 5_000
MAX_SHEET_TEXT = 100_000  # characters of a sheet's values: a cell holds up to 50,000
GOOGLE_DOC = "application/vnd.google-apps.document"
GOOGLE_SHEET = "application/vnd.google-apps.spreadsheet"
GOOGLE_TYPES = "application/vnd.google-apps."


class GoogleNotFound(NotFound):
    code = "google_not_found"


class GoogleRefused(AppError):
    code = "google_refused"
    status = 502


class EmailInvalid(AppError):
    code = "email_invalid"


class IdInvalid(AppError):
    code = "google_id_invalid"


def url(api: str, path: str) -> str:
    return (settings.GOOGLE_API_BASE or HOSTS[api]) + path


def google(context: ToolContext, method: str, api: str, path: str, what: str, **options):
    """``call`` as the account the tool call in CONTEXT resolves to."""
    return call(account_for(context, "google"), method, api, path, what, **options)


def call(connection: Connection, method: str, api: str, path: str, what: str, **options):
    """METHOD on PATH of one of Google's APIs as CONNECTION; the JSON answer (None when empty).
    WHAT names the thing asked for, for the model to read when it is not found."""
    response = fetch(connection, method, api, path, what, **options)
    return response.json() if response.content else None


def fetch(connection: Connection, method: str, api: str, path: str, what: str, **options):
    """``call``'s answer as it came (a file's bytes), once checked."""
    response = api_request(connection, method, url(api, path), **options)
    checked(response, what, connection)
    return response


def checked(response: httpx.Response, what: str, connection: Connection) -> None:
    """Google's refusal as an error the model can act on; nothing for a success."""
    if response.is_success:
        return
    if response.status_code == 404:
        raise GoogleNotFound(f"{what} was not found in the Google account {connection.account}.")
    try:
        data = response.json()
    except ValueError:
        data = {}
    # A gateway's error body may be any JSON, not Google's {"error": {...}}.
    error = (data.get("error") if isinstance(data, dict) else None) or {}
    message = error.get("message") if isinstance(error, dict) else str(error)
    raise GoogleRefused(
        f"Google refused ({response.status_code}): {message or response.reason_phrase}"
        + retry_note(response)
    )


def cut(text: str, limit: int = MAX_TEXT) -> dict:
    if len(text) <= limit:
        return {"text": text}
    return {"text": text[:limit], "truncated": f"cut at {limit} of {len(text)} characters"}


def path_id(value: str) -> str:
    """An id as one path segment (ids come from the model). "." and ".." are refused: the HTTP
    client resolves them, so event ".." would PATCH the calendar itself."""
    if value in (".", ".."):
        raise IdInvalid(f"{value!r} is not a Google id.")
    return quote(value, safe="")


def google_tool(name: str, **options):
    """A tool acting on the Google account the call resolves to: granted by an owner, not to every
    agent."""
    return tool(name, connection="google", platform=False, **options)


# ---- Gmail ---------------------------------------------------------------------------------

GMAIL = "/gmail/v1/users/me"


def b64url_decode(data: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
    except (binascii.Error, ValueError):
        return b""


def header(payload: dict, name: str) -> str:
    for found in payload.get("headers") or []:
        if found.get("name", "").lower() == name.lower():
            return found.get("value", "")
    return ""


def part_text(part: dict) -> str:
    charset = "utf-8"
    for item in header(part, "Content-Type").split(";")[1:]:
        key, _, value = item.strip().partition("=")
        if key.lower() == "charset" and value:
            charset = value.strip('"')
    data = b64url_decode((part.get("body") or {}).get("data", ""))
    try:
        return data.decode(charset, errors="replace")
    except LookupError:
        return data.decode("utf-8", errors="replace")


def parts_of(payload: dict, mime_type: str) -> list[dict]:
    """The parts of a MIME payload (itself included) of MIME_TYPE that are not attachments."""
    if payload.get("parts"):
        return [p for part in payload["parts"] for p in parts_of(part, mime_type)]
    if payload.get("mimeType", "").lower() == mime_type and not payload.get("filename"):
        return [payload]
    return []


def body_text(payload: dict) -> str:
    """The plain text of a message: its text/plain parts, else its HTML parts as text."""
    plain = parts_of(payload, "text/plain")
    if plain:
        return "\n".join(part_text(p) for p in plain).strip()
    page = TextOfPage()
    for part in parts_of(payload, "text/html"):
        page.feed(part_text(part))
    page.close()
    return page.text


def attachments(payload: dict) -> list[str]:
    if payload.get("parts"):
        return [name for part in payload["parts"] for name in attachments(part)]
    return [payload["filename"]] if payload.get("filename") else []


def raw_message(email: Email) -> str:
    """EMAIL as Gmail takes it: an RFC 822 message, base64url-encoded (Gmail adds From)."""
    message = EmailMessage()
    try:
        message["To"] = email.to
        if email.cc:
            message["Cc"] = email.cc
        if email.bcc:
            message["Bcc"] = email.bcc
        message["Subject"] = email.subject
    except (ValueError, TypeError) as exc:  # a header the email package cannot write
        raise EmailInvalid(f"The email cannot be written: {exc}.") from None
    message.set_content(email.body)
    return base64.urlsafe_b64encode(message.as_bytes(policy=SMTP)).decode("ascii")


def email_argument(arguments: dict) -> Email:
    return Email(
        to=arguments.get("to", ""),
        subject=arguments.get("subject", ""),
        body=arguments.get("body", ""),
        cc=arguments.get("cc", ""),
        bcc=arguments.get("bcc", ""),
        thread_id=arguments.get("thread_id", ""),
    )


def with_thread(email: Email, body: dict) -> dict:
    if email.thread_id:
        body["threadId"] = email.thread_id
    return body


def create_draft(connection: Connection, email: Email) -> dict:
    message = with_thread(email, {"raw": raw_message(email)})
    return call(
        connection, "POST", "gmail", f"{GMAIL}/drafts", "The mailbox", json={"message": message}
    )


def update_draft(connection: Connection, draft_id: str, email: Email) -> dict:
    message = with_thread(email, {"raw": raw_message(email)})
    return call(
        connection,
        "PUT",
        "gmail",
        f"{GMAIL}/drafts/{path_id(draft_id)}",
        f"The draft {draft_id}",
        json={"id": draft_id, "message": message},
    )


def send_draft(connection: Connection, draft_id: str) -> dict:
    return call(
        connection,
        "POST",
        "gmail",
        f"{GMAIL}/drafts/send",
        f"The draft {draft_id}",
        json={"id": draft_id},
    )


def send_email(connection: Connection, email: Email) -> dict:
    return call(
        connection,
        "POST",
        "gmail",
        f"{GMAIL}/messages/send",
        "The mailbox",
        json=with_thread(email, {"raw": raw_message(email)}),
    )


EMAIL_FIELDS = {
    "to": {
        "type": "string",
        "minLength": 3,
        "maxLength": 2000,
        "description": "Recipients, comma-separated (Name <a@b.c>, d@e.f).",
    },
    "cc": {"type": "string", "maxLength": 2000},
    "bcc": {"type": "string", "maxLength": 2000},
    "subject": {"type": "string", "maxLength": 500},
    "body": {"type": "string", "maxLength": 100_000, "description": "Plain text."},
    "thread_id": {
        "type": "string",
        "maxLength": 100,
        "description": "The Gmail thread this answers, if any.",
    },
}


@google_tool(
    "gmail_search",
    description=(
        "Search the connected Gmail mailbox with Gmail's search syntax (from:ana subject:invoice "
        "newer_than:7d is:unread …). Returns the newest matches: id, thread id, from, to, "
        "subject, date and a snippet. Read one in full with gmail_read."
    ),
    risk=Risk.READ,
    timeout_seconds=60,
    input_schema={
        "type": "object",
        "properties": {
            "q": {"type": "string", "maxLength": 500},
            "max": {"type": "integer", "minimum": 1, "maximum": 25, "default": 10},
        },
        "required": ["q"],
        "additionalProperties": False,
    },
)
def gmail_search(context: ToolContext, arguments: dict):
    connection = account_for(context, "google")
    params = {"q": arguments["q"], "maxResults": arguments.get("max", 10)}
    found = (
        call(connection, "GET", "gmail", f"{GMAIL}/messages", "The mailbox", params=params) or {}
    )
    headers = [("metadataHeaders", name) for name in ("From", "To", "Subject", "Date")]
    messages = []
    for listed in found.get("messages", []):
        message = call(
            connection,
            "GET",
            "gmail",
            f"{GMAIL}/messages/{path_id(listed['id'])}",
            f"The message {listed['id']}",
            params=[("format", "metadata"), *headers],
        )
        payload = message.get("payload") or {}
        messages.append(
            {
                "id": message["id"],
                "thread_id": message.get("threadId", ""),
                "from": header(payload, "From"),
                "to": header(payload, "To"),
                "subject": header(payload, "Subject"),
                "date": header(payload, "Date"),
                "snippet": message.get("snippet", ""),
            }
        )
    return {"account": connection.account, "messages": messages}


@google_tool(
    "gmail_read",
    description=(
        "Read one email of the connected Gmail mailbox by its message id: its headers and its "
        "plain text body (attachments are only named)."
    ),
    risk=Risk.READ,
    input_schema={
        "type": "object",
        "properties": {"id": {"type": "string", "minLength": 1, "maxLength": 100}},
        "required": ["id"],
        "additionalProperties": False,
    },
)
def gmail_read(context: ToolContext, arguments: dict):
    message = google(
        context,
        "GET",
        "gmail",
        f"{GMAIL}/messages/{path_id(arguments['id'])}",
        f"The message {arguments['id']}",
        params={"format": "full"},
    )
    payload = message.get("payload") or {}
    read = {
        "id": message["id"],
        "thread_id": message.get("threadId", ""),
        "labels": message.get("labelIds", []),
        **{name.lower(): header(payload, name) for name in ("From", "To", "Cc", "Subject", "Date")},
        **cut(body_text(payload)),
    }
    if attachments(payload):
        read["attachments"] = attachments(payload)
    return read


@google_tool(
    "gmail_draft",
    description=(
        "Save an email as a draft in the connected Gmail mailbox (not sent). Returns the draft's "
        "id, which gmail_send can send later."
    ),
    risk=Risk.EXTERNAL,
    input_schema={
        "type": "object",
        "properties": EMAIL_FIELDS,
        "required": ["to", "subject", "body"],
        "additionalProperties": False,
    },
)
def gmail_draft(context: ToolContext, arguments: dict):
    draft = create_draft(account_for(context, "google"), email_argument(arguments))
    message = draft.get("message") or {}
    return {
        "draft_id": draft["id"],
        "message_id": message.get("id"),
        "thread_id": message.get("threadId"),
    }


@google_tool(
    "gmail_send",
    description=(
        "Send an email from the connected Gmail account: give to, subject and body (cc, bcc, "
        "thread_id optional), or the draft_id of a saved draft to send that draft."
    ),
    risk=Risk.EXTERNAL,
    input_schema={
        "type": "object",
        "properties": {**EMAIL_FIELDS, "draft_id": {"type": "string", "maxLength": 100}},
        "additionalProperties": False,
    },
)
def gmail_send(context: ToolContext, arguments: dict):
    connection = account_for(context, "google")
    if arguments.get("draft_id"):
        if set(arguments) - {"draft_id"}:
            raise EmailInvalid("Give either draft_id alone, or to, subject and body; not both.")
        sent = send_draft(connection, arguments["draft_id"])
    else:
        if not arguments.get("to") or "subject" not in arguments or "body" not in arguments:
            raise EmailInvalid("Give to, subject and body (or the draft_id of a saved draft).")
        sent = send_email(connection, email_argument(arguments))
    return {"sent": True, "message_id": sent["id"], "thread_id": sent.get("threadId")}


# ---- Calendar ------------------------------------------------------------------------------


def calendar_path(calendar_id: str, event_id: str = "") -> str:
    path = f"/calendar/v3/calendars/{path_id(calendar_id)}/events"
    return f"{path}/{path_id(event_id)}" if event_id else path


def when(value: str, time_zone: str = "") -> dict:
    """A start or end as Calendar takes it: a date for an all-day event, else a date-time."""
    if len(value) == 10:  # YYYY-MM-DD
        return {"date": value}
    return {"dateTime": value, **({"timeZone": time_zone} if time_zone else {})}


def event_out(event: dict) -> dict:
    out = {
        "id": event["id"],
        "summary": event.get("summary", ""),
        "start": event.get("start", {}).get("dateTime") or event.get("start", {}).get("date"),
        "end": event.get("end", {}).get("dateTime") or event.get("end", {}).get("date"),
    }
    for key in ("location", "status", "htmlLink"):
        if event.get(key):
            out[key] = event[key]
    if event.get("description"):
        out["description"] = event["description"][:500]
    if event.get("attendees"):
        out["attendees"] = [a.get("email") for a in event["attendees"]]
    return out


def event_body(arguments: dict) -> dict:
    """The Calendar event fields among ARGUMENTS (only those given: a PATCH keeps the rest)."""
    zone = arguments.get("time_zone", "")
    body = {
        key: arguments[key] for key in ("summary", "description", "location") if key in arguments
    }
    for key in ("start", "end"):
        if key in arguments:
            body[key] = when(arguments[key], zone)
    if "attendees" in arguments:
        body["attendees"] = [{"email": address} for address in arguments["attendees"]]
    return body


CALENDAR_ID = {"type": "string", "maxLength": 200, "default": "primary"}
EVENT_FIELDS = {
    "calendar_id": CALENDAR_ID,
    "summary": {"type": "string", "maxLength": 500},
    "description": {"type": "string", "maxLength": 8000},
    "location": {"type": "string", "maxLength": 500},
    "start": {
        "type": "string",
        "minLength": 10,
        "maxLength": 40,
        "description": "RFC 3339 date-time with offset (2026-03-02T10:00:00+01:00), or a "
        "date (2026-03-02) for an all-day event.",
    },
    "end": {
        "type": "string",
        "minLength": 10,
        "maxLength": 40,
        "description": "Like start; for an all-day event, the day after the last day.",
    },
    "time_zone": {"type": "string", "maxLength": 64, "description": "e.g. Europe/Lisbon"},
    "attendees": {
        "type": "array",
        "maxItems": 100,
        "items": {"type": "string", "minLength": 3, "maxLength": 320},
    },
}


@google_tool(
    "calendar_list_events",
    description=(
        "List the events of a Google Calendar (primary unless calendar_id says otherwise) "
        "between time_min and time_max (RFC 3339; time_min defaults to now), soonest first."
    ),
    risk=Risk.READ,
    input_schema={
        "type": "object",
        "properties": {
            "calendar_id": CALENDAR_ID,
            "time_min": {"type": "string", "maxLength": 40},
            "time_max": {"type": "string", "maxLength": 40},
            "q": {"type": "string", "maxLength": 200},
            "max": {"type": "integer", "minimum": 1, "maximum": 100, "default": 25},
        },
        "additionalProperties": False,
    },
)
def calendar_list_events(context: ToolContext, arguments: dict):
    calendar_id = arguments.get("calendar_id", "primary")
    params = {
        "timeMin": arguments.get("time_min") or timezone.now().isoformat(),
        "singleEvents": "true",
        "orderBy": "startTime",
        "maxResults": arguments.get("max", 25),
    }
    if arguments.get("time_max"):
        params["timeMax"] = arguments["time_max"]
    if arguments.get("q"):
        params["q"] = arguments["q"]
    found = google(
        context,
        "GET",
        "calendar",
        calendar_path(calendar_id),
        f"The calendar {calendar_id}",
        params=params,
    )
    return {"calendar": calendar_id, "events": [event_out(e) for e in found.get("items", [])]}


@google_tool(
    "calendar_create_event",
    description=(
        "Create an event in a Google Calendar (primary by default). Attendees, if any, are "
        "sent Google's invitation."
    ),
    risk=Risk.EXTERNAL,
    input_schema={
        "type": "object",
        "properties": EVENT_FIELDS,
        "required": ["summary", "start", "end"],
        "additionalProperties": False,
    },
)
def calendar_create_event(context: ToolContext, arguments: dict):
    calendar_id = arguments.get("calendar_id", "primary")
    params = {"sendUpdates": "all" if arguments.get("attendees") else "none"}
    event = google(
        context,
        "POST",
        "calendar",
        calendar_path(calendar_id),
        f"The calendar {calendar_id}",
        params=params,
        json=event_body(arguments),
    )
    return event_out(event)


@google_tool(
    "calendar_update_event",
    description=(
        "Change an event of a Google Calendar by its id: only the fields given change. Its "
        "attendees are told of the change."
    ),
    risk=Risk.EXTERNAL,
    input_schema={
        "type": "object",
        "properties": {
            "event_id": {"type": "string", "minLength": 1, "maxLength": 200},
            **EVENT_FIELDS,
        },
        "required": ["event_id"],
        "minProperties": 2,
        "additionalProperties": False,
    },
)
def calendar_update_event(context: ToolContext, arguments: dict):
    calendar_id, event_id = arguments.get("calendar_id", "primary"), arguments["event_id"]
    event = google(
        context,
        "PATCH",
        "calendar",
        calendar_path(calendar_id, event_id),
        f"The event {event_id} in calendar {calendar_id}",
        params={"sendUpdates": "all"},
        json=event_body(arguments),
    )
    return event_out(event)


# ---- Drive, Docs, Sheets -------------------------------------------------------------------

FILE_FIELDS = "id,name,mimeType,modifiedTime,webViewLink"


def file_out(found: dict) -> dict:
    return {key: found[key] for key in FILE_FIELDS.split(",") if key in found}


@google_tool(
    "drive_list",
    description=(
        "List files of the connected Google Drive, newest first, optionally filtered with a "
        "Drive query (name contains 'budget' and mimeType = "
        "'application/vnd.google-apps.spreadsheet'). Returns id, name, type, modified time."
    ),
    risk=Risk.READ,
    input_schema={
        "type": "object",
        "properties": {
            "q": {"type": "string", "maxLength": 1000},
            "max": {"type": "integer", "minimum": 1, "maximum": 100, "default": 25},
        },
        "additionalProperties": False,
    },
)
def drive_list(context: ToolContext, arguments: dict):
    q = "trashed = false"
    if arguments.get("q"):
        q = f"({arguments['q']}) and {q}"
    params = {
        "q": q,
        "pageSize": arguments.get("max", 25),
        "orderBy": "modifiedTime desc",
        "fields": f"files({FILE_FIELDS})",
    }
    found = google(context, "GET", "drive", "/drive/v3/files", "Drive", params=params)
    return {"files": [file_out(f) for f in found.get("files", [])]}


def document_text(document: dict) -> str:
    """The text of a Google Doc: its body's paragraphs, text runs joined (tables too)."""
    return "".join(content_text(document.get("body", {}).get("content", [])))


def content_text(content: list) -> list[str]:
    out = []
    for element in content:
        for run in (element.get("paragraph") or {}).get("elements", []):
            out.append((run.get("textRun") or {}).get("content", ""))
        for row in (element.get("table") or {}).get("tableRows", []):
            for cell in row.get("tableCells", []):
                out += content_text(cell.get("content", []))
    return out


def first_sheet(context: ToolContext, spreadsheet_id: str) -> str:
    found = google(
        context,
        "GET",
        "sheets",
        f"/v4/spreadsheets/{path_id(spreadsheet_id)}",
        f"The spreadsheet {spreadsheet_id}",
        params={"fields": "sheets.properties.title"},
    )
    title = found["sheets"][0]["properties"]["title"]
    return "'" + title.replace("'", "''") + "'"


def sheet_values(context: ToolContext, spreadsheet_id: str, cells: str) -> dict:
    found = google(
        context,
        "GET",
        "sheets",
        f"/v4/spreadsheets/{path_id(spreadsheet_id)}/values/{path_id(cells)}",
        f"The spreadsheet {spreadsheet_id} (range {cells})",
    )
    values, count, size, kept = found.get("values", []), 0, 0, []
    for row in values:
        count += len(row)
        size += sum(len(str(cell)) for cell in row)
        if count > MAX_CELLS or size > MAX_SHEET_TEXT:
            break
        kept.append(row)
    out = {"range": found.get("range", cells), "values": kept}
    if len(kept) < len(values):
        out["truncated"] = (
            f"first {len(kept)} of {len(values)} rows (at most {MAX_CELLS} cells, "
            f"{MAX_SHEET_TEXT} characters)"
        )
    return out


@google_tool(
    "drive_read",
    description=(
        "Read a file of the connected Google Drive by its id: a Google Doc as text, a Google "
        "Sheet's values (the first sheet, or the A1 range given), other text files as they are."
    ),
    risk=Risk.READ,
    input_schema={
        "type": "object",
        "properties": {
            "file_id": {"type": "string", "minLength": 1, "maxLength": 200},
            "range": {"type": "string", "maxLength": 200, "description": "Sheets: e.g. Q3!A1:F40"},
        },
        "required": ["file_id"],
        "additionalProperties": False,
    },
)
def drive_read(context: ToolContext, arguments: dict):
    file_id = arguments["file_id"]
    connection = account_for(context, "google")
    found = call(
        connection,
        "GET",
        "drive",
        f"/drive/v3/files/{path_id(file_id)}",
        f"The file {file_id}",
        params={"fields": FILE_FIELDS},
    )
    kind, out = found.get("mimeType", ""), file_out(found)
    if kind == GOOGLE_DOC:
        document = call(
            connection,
            "GET",
            "docs",
            f"/v1/documents/{path_id(file_id)}",
            f"The document {file_id}",
        )
        return {**out, **cut(document_text(document))}
    if kind == GOOGLE_SHEET:
        cells = arguments.get("range") or first_sheet(context, file_id)
        return {**out, **sheet_values(context, file_id, cells)}
    path = f"/drive/v3/files/{path_id(file_id)}"
    if kind.startswith(GOOGLE_TYPES):  # slides, drawings…: their text export
        options = {"params": {"mimeType": "text/plain"}}
        path += "/export"
    else:
        # Only the start of a file (what the model is shown at most): a huge one is not
        # downloaded whole to be cut. Drive answers 206 with the file's size in Content-Range.
        options = {"params": {"alt": "media"}, "headers": {"Range": f"bytes=0-{MAX_BYTES - 1}"}}
    response = api_request(connection, "GET", url("drive", path), **options)
    if response.status_code == 416:  # an empty file has no first byte for the Range to ask
        return {**out, "text": ""}
    checked(response, f"The file {file_id}", connection)
    size = response.headers.get("Content-Range", "").rpartition("/")[2]
    size = int(size) if size.isdigit() else len(response.content)
    if b"\0" in response.content[:4096]:
        return {**out, "text": "", "note": f"A binary file of {size} bytes."}
    text = cut(response.content.decode(response.encoding or "utf-8", errors="replace"))
    if size > len(response.content):
        text["truncated"] = f"cut at {len(text['text'])} characters of a file of {size} bytes"
    return {**out, **text}


def document_end(document: dict) -> int:
    """The index just past a Doc's body: its last element's end (the final newline included)."""
    content = document.get("body", {}).get("content", [])
    return content[-1]["endIndex"] if content else 1


def write_document(context: ToolContext, document_id: str, text: str, replace: bool) -> dict:
    path = f"/v1/documents/{path_id(document_id)}"
    requests = []
    if replace:
        end = document_end(google(context, "GET", "docs", path, f"The document {document_id}"))
        # The body's final newline cannot be deleted: everything before it is replaced.
        if end - 1 > 1:
            requests.append(
                {"deleteContentRange": {"range": {"startIndex": 1, "endIndex": end - 1}}}
            )
        requests.append({"insertText": {"location": {"index": 1}, "text": text}})
    else:
        requests.append({"insertText": {"endOfSegmentLocation": {}, "text": text}})
    return google(
        context,
        "POST",
        "docs",
        f"{path}:batchUpdate",
        f"The document {document_id}",
        json={"requests": requests},
    )


@google_tool(
    "docs_create",
    description="Create a Google Doc in the connected Drive with a title and, optionally, text.",
    risk=Risk.EXTERNAL,
    input_schema={
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": 500},
            "text": {"type": "string", "maxLength": 200_000},
        },
        "required": ["title"],
        "additionalProperties": False,
    },
)
def docs_create(context: ToolContext, arguments: dict):
    document = google(
        context, "POST", "docs", "/v1/documents", "Docs", json={"title": arguments["title"]}
    )
    document_id = document["documentId"]
    if arguments.get("text"):
        write_document(context, document_id, arguments["text"], replace=False)
    return {
        "document_id": document_id,
        "title": document.get("title", arguments["title"]),
        "url": f"https://docs.google.com/document/d/{document_id}/edit",
    }


@google_tool(
    "docs_update",
    description=(
        "Write to a Google Doc by its id: append text at its end (mode append, the default), or "
        "replace all its text (mode replace)."
    ),
    risk=Risk.EXTERNAL,
    input_schema={
        "type": "object",
        "properties": {
            "document_id": {"type": "string", "minLength": 1, "maxLength": 200},
            "text": {"type": "string", "minLength": 1, "maxLength": 200_000},
            "mode": {"enum": ["append", "replace"], "default": "append"},
        },
        "required": ["document_id", "text"],
        "additionalProperties": False,
    },
)
def docs_update(context: ToolContext, arguments: dict):
    replace = arguments.get("mode") == "replace"
    write_document(context, arguments["document_id"], arguments["text"], replace)
    return {
        "document_id": arguments["document_id"],
        "updated": "replaced" if replace else "appended",
    }


@google_tool(
    "sheets_update",
    description=(
        "Write values into a Google Sheet by its id, from the top-left cell of an A1 range "
        "(Sheet1!B2:D4): rows of values, entered as if typed (formulas such as =SUM(B2:B4) work)."
    ),
    risk=Risk.EXTERNAL,
    input_schema={
        "type": "object",
        "properties": {
            "spreadsheet_id": {"type": "string", "minLength": 1, "maxLength": 200},
            "range": {"type": "string", "minLength": 2, "maxLength": 200},
            "values": {
                "type": "array",
                "minItems": 1,
                "maxItems": 1000,
                "items": {
                    "type": "array",
                    "maxItems": 200,
                    "items": {"type": ["string", "number", "boolean", "null"]},
                },
            },
        },
        "required": ["spreadsheet_id", "range", "values"],
        "additionalProperties": False,
    },
)
def sheets_update(context: ToolContext, arguments: dict):
    spreadsheet_id, cells = arguments["spreadsheet_id"], arguments["range"]
    updated = google(
        context,
        "PUT",
        "sheets",
        f"/v4/spreadsheets/{path_id(spreadsheet_id)}/values/{path_id(cells)}",
        f"The spreadsheet {spreadsheet_id} (range {cells})",
        params={"valueInputOption": "USER_ENTERED"},
        json={"range": cells, "majorDimension": "ROWS", "values": arguments["values"]},
    )
    return {key: updated.get(key) for key in ("updatedRange", "updatedRows", "updatedCells")}


# ---- the email-draft card's buttons (artifacts.mailbox) ------------------------------------


class Gmail:
    """Send / Save draft on an email-draft card, as the person who clicked: the account a tool
    call answering them in the card's conversation would use."""

    def account(self, user, card: Message, action: str) -> Connection:
        try:
            return connection_for(card.conversation.workspace, user, "google")
        except NotConnected:
            raise NotConnected(
                f"Connect a Google account to {action}: none is connected for the workspace "
                f"“{card.conversation.workspace.name}” or for you (Settings → Connections). "
                "Nothing was sent or saved."
            ) from None

    def send(self, user, card: Message, email: Email, saved: dict | None) -> dict:
        connection = self.account(user, card, "send")
        sent = None
        if saved and saved.get("account") == connection.account:
            try:
                sent = send_draft(connection, saved["gmail_draft_id"])
            except GoogleNotFound:
                pass  # sent or deleted in Gmail meanwhile: send the card's email itself
        sent = sent or send_email(connection, email)
        return {"gmail_message_id": sent["id"], "account": connection.account}

    def save_draft(self, user, card: Message, email: Email, saved: dict | None) -> dict:
        connection = self.account(user, card, "save a draft")
        draft = None
        if saved and saved.get("account") == connection.account:
            try:
                draft = update_draft(connection, saved["gmail_draft_id"], email)
            except GoogleNotFound:
                pass
        draft = draft or create_draft(connection, email)
        return {"gmail_draft_id": draft["id"], "account": connection.account}


set_mailbox(Gmail())
