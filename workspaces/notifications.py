"""The inbox: what needs a person (a mention, a DM, an approval to decide, a reminder).

Here, the lowest layer that knows people, so that conversations, work and routines above can
write into it where the event happens (``notify_person``). Each change is announced after commit
on the person's own topic (``user.<id>``), where their browsers listen; and unread ones not yet
emailed go out in a digest at most once per the person's chosen period (``send_digests``).
"""

import logging
from datetime import timedelta

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, Subquery
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from agntchat.core.events import publish_live
from agntchat.core.sweeps import sweep
from agntchat.core.text import clipped
from workspaces.access import notifications_visible_to
from workspaces.models import Membership, Notification, User

log = logging.getLogger(__name__)

MAX_TEXT = 300
DIGEST_PERIODS = {"hourly": timedelta(hours=1), "daily": timedelta(days=1)}
DIGEST_CHOICES = ("off", *DIGEST_PERIODS)
DIGEST_MAX_ITEMS = 50
# What a person's inbox keeps: their newest notifications, the oldest going past it. Every post
# in a direct conversation adds one for each other person in it, read or not: without a bound,
# the table, the unread count and marking all read (every id, in one event) grew for ever.
MAX_KEPT = 1000


def notification_data(notification: Notification) -> dict:
    """A notification as REST and live events show it (snake_case; wire() camelCases it)."""
    return {
        "id": notification.id,
        "workspace_id": notification.workspace_id,
        "kind": notification.kind,
        "text": notification.text,
        "link": notification.link,
        "conversation_id": notification.conversation_id,
        "message_id": notification.message_id,
        "target_id": notification.target_id,
        "created_at": notification.created_at,
        "read_at": notification.read_at,
    }


def unread_count(user) -> int:
    return notifications_visible_to(user).filter(read_at__isnull=True).count()


def conversation_link(workspace_id, conversation_id, message_id=None) -> str:
    """The page of a conversation, at the message when one is given."""
    path = reverse("conversation", args=[workspace_id, conversation_id])
    return f"{path}#msg-{message_id}" if message_id else path


def snippet(text: str, length: int = 140) -> str:
    """TEXT on one line, cut to LENGTH with an ellipsis."""
    return clipped(" ".join((text or "").split()), length)


def notify_person(
    user,
    workspace_id,
    kind: str,
    text: str,
    link: str,
    *,
    actor=None,
    conversation_id=None,
    message_id=None,
    target_id=None,
) -> Notification | None:
    """Put one item in USER's inbox and tell their browsers after commit. Nothing when USER is
    the ACTOR (nobody is notified of their own doing) or no longer a member of the workspace.
    Past MAX_KEPT of theirs, the oldest go."""
    if isinstance(actor, User) and actor.pk == user.pk:
        return None
    if not Membership.objects.filter(workspace_id=workspace_id, user=user).exists():
        return None
    # No savepoint inside a caller's transaction (a post's): two statements per person notified,
    # and a failure here fails the caller anyway.
    with transaction.atomic(savepoint=False):
        notification = Notification.objects.create(
            user=user,
            workspace_id=workspace_id,
            kind=kind,
            text=snippet(text, MAX_TEXT),
            link=link,
            conversation_id=conversation_id,
            message_id=message_id,
            target_id=target_id,
        )
        oldest_kept = (
            Notification.objects.filter(user=user)
            .order_by("-created_at")
            .values("created_at")[MAX_KEPT - 1 : MAX_KEPT]
        )
        # Those another transaction holds (a post notifying the same people in another order,
        # marking read) are left for the next time: waiting on them could deadlock.
        past = Notification.objects.filter(user=user, created_at__lt=Subquery(oldest_kept))
        past = past.select_for_update(skip_locked=True).values("pk")
        Notification.objects.filter(pk__in=Subquery(past)).delete()  # one statement
        publish_live(
            [f"user.{user.pk}"],
            "notification.created",
            notification=notification_data(notification),
            unread_count=unread_count(user),
        )
    return notification


def _mark_read(user, notifications, now=None) -> list:
    """Mark the unread ones of NOTIFICATIONS (USER's) read and tell USER's browsers; their ids."""
    now = now or timezone.now()
    with transaction.atomic():
        ids = list(
            notifications.filter(read_at__isnull=True)
            .select_for_update()
            .values_list("pk", flat=True)
        )
        if ids:
            Notification.objects.filter(pk__in=ids).update(read_at=now, updated_at=now)
            publish_live(
                [f"user.{user.pk}"],
                "notification.read",
                notification_ids=ids,
                unread_count=unread_count(user),
            )
    return ids


def mark_notification_read(user, notification: Notification) -> Notification:
    """USER read NOTIFICATION (one of theirs, from access_notification); idempotent."""
    _mark_read(user, Notification.objects.filter(pk=notification.pk, user=user))
    notification.refresh_from_db(fields=["read_at", "updated_at"])
    return notification


def mark_all_notifications_read(user) -> int:
    """Everything in USER's inbox read; how many were unread."""
    return len(_mark_read(user, notifications_visible_to(user)))


def mark_conversation_notifications_read(user, conversation_id) -> int:
    """USER has read a conversation: what it brought to their inbox is read too."""
    return len(
        _mark_read(user, notifications_visible_to(user).filter(conversation_id=conversation_id))
    )


def _notifications_of(**where) -> list[Notification]:
    """The notifications about something (WHERE: its message_id or target_id), each marked
    ``shown`` when its person still sees it (``notifications_visible_to``): one query for all."""
    member = Membership.objects.filter(workspace_id=OuterRef("workspace_id"), user=OuterRef("user"))
    return list(Notification.objects.filter(**where).annotate(shown=Exists(member)))


def _rewrite(notifications: list[Notification]) -> int:
    """Save the new text of NOTIFICATIONS and tell each person who sees some of them after
    commit, once (``notification.updated``): an open inbox must not keep the old text either.
    How many were changed."""
    Notification.objects.bulk_update(notifications, ["text", "updated_at"])
    shown: dict = {}
    for notification in notifications:
        if notification.shown:  # one removed from the workspace hears nothing more of it
            shown.setdefault(notification.user_id, []).append(notification_data(notification))
    for user_id, changed in shown.items():
        publish_live([f"user.{user_id}"], "notification.updated", notifications=changed)
    return len(notifications)


def redact_message_notifications(message_id, text: str) -> int:
    """The message MESSAGE_ID was deleted: the notifications about it show TEXT instead of
    their snippet of it (inboxes and digests must not keep what its author took back). How
    many were changed."""
    changed, now = _notifications_of(message_id=message_id), timezone.now()
    for notification in changed:
        notification.text, notification.updated_at = snippet(text, MAX_TEXT), now
    return _rewrite(changed)


def update_message_notifications(message_id, old_body: str, new_body: str, edited: str) -> int:
    """The message MESSAGE_ID was edited from OLD_BODY to NEW_BODY: the notifications quoting it
    quote the new text (inboxes and digests must not keep what its author took back either).
    One whose quote is not whole at its end (cut to MAX_TEXT) shows EDITED instead, as a deleted
    message's show their note. How many were changed."""
    old_quote, new_quote, now = snippet(old_body), snippet(new_body), timezone.now()
    changed = _notifications_of(message_id=message_id)
    for notification in changed:
        head = notification.text.removesuffix(old_quote)
        quoted = head != notification.text  # never so when OLD_QUOTE is empty
        notification.text = snippet(head + new_quote, MAX_TEXT) if quoted else edited
        notification.updated_at = now
    return _rewrite(changed)


def settle_notifications(target_id, text: str) -> int:
    """What TARGET_ID (an approval request) asked of people is done: its notifications are read,
    for everyone, and say TEXT (how it ended) instead of asking; an open inbox is told of both.
    How many were changed."""
    unread = Notification.objects.filter(target_id=target_id, read_at__isnull=True)
    for user in User.objects.filter(Exists(unread.filter(user=OuterRef("pk")))):
        _mark_read(user, unread.filter(user=user))
    changed, now = _notifications_of(target_id=target_id), timezone.now()
    for notification in changed:
        notification.text, notification.updated_at = snippet(text, MAX_TEXT), now
    return _rewrite(changed)


def set_digest(user, digest: str) -> User:
    """How often, at most, USER's unread notifications are emailed: off, hourly or daily."""
    if digest not in DIGEST_CHOICES:
        raise ValueError(digest)
    user.digest = digest
    user.save(update_fields=["digest", "updated_at"])
    return user


# ---- the email digest -------------------------------------------------------------------------


def _digest_due(now) -> Q:
    """People whose period has passed since their last digest (or who never had one)."""
    due = Q()
    for period, length in DIGEST_PERIODS.items():
        due |= Q(digest=period) & (
            Q(digest_sent_at__isnull=True) | Q(digest_sent_at__lte=now - length)
        )
    return due


def _waiting(user):
    return notifications_visible_to(user).filter(read_at__isnull=True, emailed_at__isnull=True)


def send_digests(now=None) -> int:
    """Email each person whose period has passed their unread notifications not emailed yet;
    how many emails were sent. Safe to run from several workers at once (SKIP LOCKED)."""
    now = now or timezone.now()
    # As _waiting, for every person at once: items of a workspace they left are not theirs to
    # see (notifications_visible_to), and a person with only those is not due.
    member = Membership.objects.filter(
        workspace_id=OuterRef("workspace_id"), user_id=OuterRef("user_id")
    )
    waiting = Notification.objects.filter(
        Exists(member), user=OuterRef("pk"), read_at__isnull=True, emailed_at__isnull=True
    )
    # Only to an address its person showed they read (workspaces/accounts.py).
    due = User.objects.filter(
        _digest_due(now), Exists(waiting), is_active=True, email=F("verified_email")
    ).exclude(email="")
    return sweep(due, lambda user: _send_digest(user, now), "digest for person")


def _send_digest(user, now) -> int:
    """Under the person's row lock (sweep): a failed send rolls the marks back and the next run
    tries again; a second worker skips the row rather than send it twice."""
    items = list(_waiting(user).order_by("-created_at")[:DIGEST_MAX_ITEMS])
    if not items:
        return 0
    _digest_email(user, items).send()
    Notification.objects.filter(pk__in=[n.pk for n in items]).update(emailed_at=now)
    user.digest_sent_at = now
    user.save(update_fields=["digest_sent_at", "updated_at"])
    log.info("digest emailed", extra={"user": str(user.pk), "items": len(items)})
    return 1


def _digest_email(user, items) -> EmailMultiAlternatives:
    site = settings.AGNTCHAT_URL.rstrip("/")
    context = {
        "user": user,
        "items": [{"notification": n, "url": site + n.link} for n in items],
        "inbox_url": site + reverse("inbox", args=[items[0].workspace_id]),
        "settings_note": f"You get this {user.digest}; change it in your inbox's settings.",
    }
    count = len(items)
    subject = f"agntchat: {count} unread notification{'s' if count != 1 else ''}"
    email = EmailMultiAlternatives(
        subject,
        render_to_string("workspaces/digest_email.txt", context),
        settings.DEFAULT_FROM_EMAIL,
        [user.email],
    )
    email.attach_alternative(render_to_string("workspaces/digest_email.html", context), "text/html")
    return email
