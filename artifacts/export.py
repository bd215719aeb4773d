"""A workspace's archive for its owner: a zip of its conversations (each as JSON, with messages,
authors, times and threads, and as a readable Markdown transcript), its artifacts (every
version's content) and the files attached to its messages (``attachments/<id>/<name>``, pointed
to from each message's attachment and listed in the manifest), with a manifest. Written row by
row, and each file in chunks, into a file the caller gives (a temporary file on disk), so a large
workspace never sits in memory.

What goes in is what the owner can read (the access modules' visibility): channels, and the
direct conversations and threads they take part in; others' private conversations stay private."""

import json
import shutil
from collections import defaultdict

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from agntchat.core import throttle
from artifacts.access import artifacts_visible_to
from artifacts.models import Artifact, ArtifactVersion
from conversations.access import (
    attachments_visible_to,
    conversations_visible_to,
    messages_visible_to,
)
from conversations.models import Conversation, Message
from conversations.payloads import author_data
from workspaces.access import require_owner
from workspaces.audit import record_audit
from workspaces.models import Membership

FORMAT = "agntchat-export"
VERSION = 1
EXTENSIONS = {"markdown": "md", "html": "html", "json": "json"}
CODE_EXTENSIONS = {"python": "py", "javascript": "js", "typescript": "ts", "shell": "sh"}
BATCH = 500
# A zip entry written as a stream must say up front whether it may pass 2 GiB (zip64).
ZIP64_FROM = 2**31 - 1


def _json(value) -> str:
    return json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False, indent=2)


def _name(text: str, kind: str, pk) -> str:
    """A file name that says what it is and cannot collide: slug of the title, then the id."""
    return f"{slugify(text)[:50] or kind}-{str(pk)[:8]}"


def _author_name(author: dict | None) -> str:
    return author["name"] if author else "system"


def _messages(owner, conversation: Conversation):
    return (
        messages_visible_to(owner)
        .filter(conversation=conversation)
        .select_related("author_user", "author_agent")
        .order_by("created_at", "id")
        .iterator(chunk_size=BATCH)
    )


def _message_data(message: Message, threads: dict, files: dict) -> dict:
    payload = dict(message.payload or {})
    if "attachments" in payload:
        # Each file's stored reference, with where its bytes are in the archive (None: gone).
        payload["attachments"] = [
            {**ref, "file": files.get(ref.get("id"))} for ref in payload["attachments"]
        ]
    return {
        "id": message.id,
        "created_at": message.created_at,
        "author": author_data(message),
        "kind": message.kind,
        "body": message.body,
        "payload": payload,
        "reply_to": message.reply_to_id,
        "threads": threads.get(message.id, []),
    }


def _write_conversation(archive, owner, conversation, path: str, threads: dict, files: dict) -> int:
    """CONVERSATION's JSON file at PATH.json and its transcript at PATH.md; its message count."""
    participants = [
        {"type": "agent", "id": p.agent_id, "name": p.agent.name}
        if p.agent_id
        else {"type": "person", "id": p.user_id, "name": p.user.label}
        for p in conversation.participants.select_related("user", "agent").order_by("created_at")
    ]
    head = {
        "id": conversation.id,
        "kind": conversation.kind,
        "title": conversation.title,
        "created_at": conversation.created_at,
        "archived_at": conversation.archived_at,
        "parent_message": conversation.parent_message_id,
        "thread_status": conversation.thread_status,
        "summary": conversation.summary,
        "participants": participants,
    }
    count = 0
    with archive.open(f"{path}.json", "w") as out:
        # The head, then the messages one at a time: the list is never built in memory.
        out.write(_json(head)[:-2].encode() + b',\n  "messages": [')
        for message in _messages(owner, conversation):
            out.write((",\n" if count else "\n").encode())
            out.write(_json(_message_data(message, threads, files)).encode())
            count += 1
        out.write(b"\n  ]\n}\n")
    with archive.open(f"{path}.md", "w") as out:
        title = conversation.title or conversation.get_kind_display()
        out.write(
            f"# {title}\n\n*{conversation.get_kind_display()}* · `{conversation.id}`\n".encode()
        )
        if conversation.parent_message_id:
            out.write(f"\nA side thread of message `{conversation.parent_message_id}`.\n".encode())
        for message in _messages(owner, conversation):
            when = message.created_at.strftime("%Y-%m-%d %H:%M UTC")
            name = _author_name(author_data(message))
            text = f"\n**{name}** · {when}\n\n{message.body or '(no text)'}\n"
            for ref in (message.payload or {}).get("attachments", ()):
                if files.get(ref.get("id")):
                    text += f"\n📎 [{ref['name']}]({files[ref['id']]})\n"
            for thread in threads.get(message.id, []):
                text += f"\n→ side thread `{thread}`\n"
            out.write(text.encode())
    return count


def _write_attachments(archive, owner, conversations: list) -> tuple[list, dict]:
    """The bytes of every file of the messages exported, each at attachments/<id>/<name>, copied
    from storage in chunks (one file open at a time). Returns the manifest's entries and a map of
    attachment id → its path in the archive."""
    entries, files = [], {}
    attachments = (
        attachments_visible_to(owner)
        .filter(conversation__in=conversations, message__isnull=False)
        .order_by("created_at", "id")
        .iterator(chunk_size=BATCH)
    )
    for attachment in attachments:
        # The stored name was made safe at upload (no folders); the id keeps names apart.
        path = f"attachments/{attachment.id}/{attachment.name}"
        try:
            source = attachment.file.open("rb")
        except FileNotFoundError:
            continue  # its bytes are gone from storage: the message's reference says None
        with source, archive.open(path, "w", force_zip64=attachment.size >= ZIP64_FROM) as out:
            shutil.copyfileobj(source, out)  # 64 KB at a time
        files[str(attachment.id)] = path
        entries.append(
            {
                "id": attachment.id,
                "name": attachment.name,
                "content_type": attachment.content_type,
                "size": attachment.size,
                "sha256": attachment.sha256,
                "conversation": attachment.conversation_id,
                "message": attachment.message_id,
                "file": path,
            }
        )
    return entries, files


def _artifact_extension(artifact: Artifact) -> str:
    if artifact.kind == Artifact.Kind.CODE:
        return CODE_EXTENSIONS.get(artifact.language.lower(), "txt")
    return EXTENSIONS.get(artifact.kind, "txt")


def _write_artifact(archive, artifact: Artifact, path: str) -> int:
    """Every version's content at PATH/vN.ext, and what each is at PATH/artifact.json."""
    versions = []
    extension = _artifact_extension(artifact)
    for version in (
        ArtifactVersion.objects.filter(artifact=artifact)
        # The source goes in, not the rendering (as large again, or more for pretty JSON).
        .defer("rendered")
        .select_related("author_user", "author_agent")
        .order_by("number")
        .iterator(chunk_size=50)
    ):
        name = f"{path}/v{version.number}.{extension}"
        archive.writestr(name, version.content)
        versions.append(
            {
                "number": version.number,
                "file": name,
                "created_at": version.created_at,
                "author": author_data(version),
                "note": version.note,
            }
        )
    about = {
        "id": artifact.id,
        "title": artifact.title,
        "kind": artifact.kind,
        "language": artifact.language,
        "conversation": artifact.conversation_id,
        "current_version": artifact.current_version,
        "versions": versions,
    }
    archive.writestr(f"{path}/artifact.json", _json(about))
    return len(versions)


def write_export(membership: Membership, archive) -> dict:
    """Write MEMBERSHIP's workspace into ARCHIVE (an open zipfile.ZipFile) and record it in the
    audit log. Only the owner may, a few times an hour (EXPORTS_PER_HOUR); the manifest is
    returned (and written as manifest.json)."""
    require_owner(membership)
    owner, workspace = membership.user, membership.workspace
    # Each archive copies the whole workspace, files and all, to disk while the request runs:
    # a loop of requests could fill the disk.
    rate = throttle.Rate(
        "exports", settings.EXPORTS_PER_HOUR, window=3600, burst=settings.EXPORTS_BURST
    )
    throttle.limit(rate, owner.pk, "exports")
    conversations = list(
        conversations_visible_to(owner).filter(workspace=workspace).order_by("created_at", "id")
    )
    threads = defaultdict(list)  # message id → the side threads opened from it
    for conversation in conversations:
        if conversation.parent_message_id:
            threads[conversation.parent_message_id].append(conversation.id)
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "workspace": {"id": workspace.id, "name": workspace.name, "kind": workspace.kind},
        "exported_at": timezone.now(),
        "exported_by": {"id": owner.id, "name": owner.label, "username": owner.username},
        "conversations": [],
        "artifacts": [],
    }
    # Files first, so that each message written after can say where its files are.
    manifest["attachments"], files = _write_attachments(archive, owner, conversations)
    for conversation in conversations:
        path = "conversations/" + _name(conversation.title, conversation.kind, conversation.id)
        count = _write_conversation(archive, owner, conversation, path, threads, files)
        manifest["conversations"].append(
            {
                "id": conversation.id,
                "kind": conversation.kind,
                "title": conversation.title,
                "messages": count,
                "file": f"{path}.json",
                "transcript": f"{path}.md",
            }
        )
    artifacts = (
        artifacts_visible_to(owner)
        .filter(conversation__workspace=workspace)
        .order_by("created_at", "id")
        .iterator(chunk_size=BATCH)
    )
    for artifact in artifacts:
        path = "artifacts/" + _name(artifact.title, artifact.kind, artifact.id)
        count = _write_artifact(archive, artifact, path)
        manifest["artifacts"].append(
            {
                "id": artifact.id,
                "title": artifact.title,
                "kind": artifact.kind,
                "conversation": artifact.conversation_id,
                "versions": count,
                "folder": path,
            }
        )
    archive.writestr("manifest.json", _json(manifest))
    with transaction.atomic():
        record_audit(
            "workspace.exported",
            actor=owner,
            workspace=workspace,
            target=workspace,
            conversations=len(manifest["conversations"]),
            artifacts=len(manifest["artifacts"]),
        )
    return manifest
