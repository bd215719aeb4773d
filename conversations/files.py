"""Files attached to messages (INT-4): what may be uploaded, signed download links that expire,
the download itself, and an attachment's shape on the wire. docs/files.md tells the whole story.

A link is ``/files/<id>/<name>?e=<expiry>&s=<signature>``: the signature (Django's signing, so
SECRET_KEY_FALLBACKS keep older links valid) covers the id and the expiry, and is the only
credential a download needs, so an agent's bridge or an <img> can fetch it as it is. Whoever
may read the message is given fresh links whenever they read it.
"""

import hashlib
import mimetypes
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, urlencode

from django.conf import settings
from django.core import signing
from django.db import transaction
from django.db.models import Q
from django.http import FileResponse, Http404, HttpResponseRedirect
from django.urls import path
from django.utils import timezone
from django.utils.text import get_valid_filename
from django.views.decorators.http import require_safe

from conversations.exceptions import ConversationRule
from conversations.models import Attachment

SALT = "conversations.files"
# Types of the extensions allowed by default (settings.FILE_UPLOAD_EXTENSIONS), so they do not
# depend on the host's mime.types; another extension an operator allows is looked up there.
TYPES = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "pdf": "application/pdf",
    "txt": "text/plain",
    "md": "text/markdown",
    "csv": "text/csv",
    "json": "application/json",
    "zip": "application/zip",
}
# Shown in the page (and opened in the browser's tab rather than saved).
OCTETS = "application/octet-stream"
INLINE = {"image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf"}
# Time links are made in: expiries rounded up to it, so the same file read again within it gets
# the same link and the browser's cache keeps the picture.
ROUNDING = 300
# A link's expiry, Unix seconds: 12 digits last past the year 30000.
EXPIRES_RE = re.compile(r"[0-9]{1,12}")


class FileRefused(ConversationRule):
    code = "file_invalid"


def too_large() -> FileRefused:
    limit = settings.FILE_UPLOAD_MAX_SIZE
    return FileRefused(
        f"A file can be at most {limit // (1024 * 1024)} MB.",
        code="file_too_large",
        status=413,
        fields={"file": "Too large."},
    )


def checked_upload(upload) -> tuple[str, str]:
    """The (name, content type) an upload is stored under, or FileRefused (nothing stored). The
    type comes from the name's extension in the allow-list; what the client declared is ignored."""
    if upload is None:
        raise FileRefused("Send the file as multipart form data, in a field named “file”.")
    if upload.size > settings.FILE_UPLOAD_MAX_SIZE:
        raise too_large()
    name = get_valid_filename(upload.name.rsplit("/", 1)[-1].rsplit("\\", 1)[-1])[-200:]
    extension = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    allowed = {e.lower() for e in settings.FILE_UPLOAD_EXTENSIONS}
    if extension not in allowed:
        raise FileRefused(
            f"Files of this type cannot be attached. Allowed: {', '.join(sorted(allowed))}.",
            code="file_type_not_allowed",
            status=415,
            fields={"file": "Type not allowed."},
        )
    content_type = TYPES.get(extension) or mimetypes.guess_type(name)[0] or OCTETS
    return name, content_type


def sha256_of(upload) -> str:
    digest = hashlib.sha256()
    for chunk in upload.chunks():
        digest.update(chunk)
    upload.seek(0)
    return digest.hexdigest()


def _signer() -> signing.Signer:
    return signing.Signer(salt=SALT)


def signed_url(attachment_id, name: str, now: float | None = None) -> tuple[str, int]:
    """A download link for the attachment and when it stops working (Unix seconds)."""
    now = timezone.now().timestamp() if now is None else now
    expires = (int(now) // ROUNDING + 1) * ROUNDING + settings.FILE_URL_MAX_AGE
    signature = _signer().signature(f"{attachment_id}:{expires}")
    query = urlencode({"e": expires, "s": signature})
    return f"/files/{attachment_id}/{quote(name)}?{query}", expires


def valid_signature(attachment_id, expires: str, signature: str) -> bool:
    # ASCII digits only, and few: isdigit() also takes "²", and int() refuses past 4300 digits.
    if not EXPIRES_RE.fullmatch(expires) or int(expires) < timezone.now().timestamp():
        return False
    try:
        _signer().unsign(f"{attachment_id}:{expires}:{signature}")
    except signing.BadSignature:
        return False
    return True


def ref_data(attachment: Attachment) -> dict:
    """What a message stores of each of its attachments (in its payload): enough to show it and
    to sign its link, so reading a conversation costs no query per file."""
    return {
        "id": str(attachment.id),
        "name": attachment.name,
        "content_type": attachment.content_type,
        "size": attachment.size,
    }


def attachment_data(ref: dict) -> dict:
    """An attachment on the wire: its stored ref with a fresh signed link."""
    url, expires = signed_url(ref["id"], ref["name"])
    return {
        **ref,
        "url": url,
        "url_expires_at": datetime.fromtimestamp(expires, tz=UTC),
        "inline": ref["content_type"] in INLINE,
    }


@require_safe  # HEAD too: the server sends its headers and leaves out the body
def download(request, attachment_id, name):
    """The file behind a signed link. A bad or expired signature, or a file gone, is a 404."""
    if not valid_signature(attachment_id, request.GET.get("e", ""), request.GET.get("s", "")):
        raise Http404
    # The signature is the permission; the row must still exist and belong to a message (or be
    # its uploader's, still to be posted: the uploader was given this link by the upload).
    # A deleted message's files go with it (actions.delete_message), links given out before too.
    attachment = (
        Attachment.objects.filter(pk=attachment_id)
        .exclude(message__deleted_at__isnull=False)
        .first()
    )
    if attachment is None or not attachment.file.storage.exists(attachment.file.name):
        raise Http404
    if settings.AWS_STORAGE_BUCKET_NAME:
        # The bucket's own presigned link, good for FILE_URL_MAX_AGE (AWS_QUERYSTRING_EXPIRE).
        return HttpResponseRedirect(
            attachment.file.storage.url(
                attachment.file.name,
                parameters={
                    "ResponseContentDisposition": _disposition(attachment),
                    "ResponseContentType": _served_type(attachment),
                },
            )
        )
    response = FileResponse(
        attachment.file.open("rb"),
        content_type=_served_type(attachment),
        as_attachment=attachment.content_type not in INLINE,
        filename=attachment.name,
    )
    response["X-Content-Type-Options"] = "nosniff"
    # A link is good for a while, and only for whoever was given it.
    left = int(request.GET["e"]) - int(timezone.now().timestamp())
    response["Cache-Control"] = f"private, max-age={max(0, left)}"
    return response


def _served_type(attachment: Attachment) -> str:
    """What a file is served as: its own type when shown in the page, else bytes to save. From
    our own origin, a file served as a script or a page (an operator may allow .js or .html)
    would run under our Content-Security-Policy's 'self'."""
    return attachment.content_type if attachment.content_type in INLINE else OCTETS


def _disposition(attachment: Attachment) -> str:
    kind = "inline" if attachment.content_type in INLINE else "attachment"
    return f"{kind}; filename*=UTF-8''{quote(attachment.name)}"


urlpatterns = [path("files/<uuid:attachment_id>/<str:name>", download, name="file-download")]


def delete_unposted(now) -> int:
    """Uploads nobody posted within FILE_UNPOSTED_HOURS, and the files of deleted messages (no
    longer shown nor served, but their bytes stayed on disk): their rows, and with them their
    bytes (``forget_bytes``)."""
    stale = Attachment.objects.filter(
        Q(message__isnull=True, created_at__lt=now - timedelta(hours=settings.FILE_UNPOSTED_HOURS))
        | Q(message__deleted_at__isnull=False)
    )
    count = 0
    for attachment in stale.iterator():
        attachment.delete()
        count += 1
    return count


def forget_bytes(sender, instance: Attachment, **kwargs) -> None:
    """An attachment's row is gone (deleted, or its message or conversation was): its bytes go
    too, once the deletion is committed (a rolled-back deletion keeps them)."""
    storage, name = instance.file.storage, instance.file.name
    if name:
        transaction.on_commit(lambda: storage.delete(name))
