"""REST for the person's inbox: list (newest first), mark one or all read, the digest setting."""

from django.db.models import Q
from django.urls import path
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agntchat.core.api import StrictSerializer, validated
from workspaces import notifications
from workspaces.access import IsPerson, access_notification, notifications_visible_to
from workspaces.exceptions import NotificationNotFound


class NotificationQuery(serializers.Serializer):
    """Query parameters: text by nature, so not a StrictSerializer."""

    unread = serializers.BooleanField(required=False, default=False)  # only the unread ones
    before = serializers.UUIDField(required=False)  # a notification's id: the page older than it
    limit = serializers.IntegerField(min_value=1, max_value=200, required=False, default=50)


class DigestInput(StrictSerializer):
    min_fields = 1
    digest = serializers.ChoiceField(choices=notifications.DIGEST_CHOICES)


class ReadInput(StrictSerializer):
    """An action that takes no body: an empty object (or none) only."""


class NotificationListView(APIView):
    """GET: the person's notifications, newest first (``unread``: only those; ``before``: a
    notification's id, for the page after it), with how many are unread."""

    queries = {"get": NotificationQuery}
    permission_classes = [IsPerson]

    def get(self, request):
        query = validated(NotificationQuery, request.query_params.dict())
        visible = notifications_visible_to(request.user)
        listed = visible.filter(read_at__isnull=True) if query["unread"] else visible
        if query.get("before"):
            anchor = visible.filter(pk=query["before"]).values("created_at", "id").first()
            if anchor is None:
                raise NotificationNotFound()
            listed = listed.filter(
                Q(created_at__lt=anchor["created_at"])
                | Q(created_at=anchor["created_at"], id__lt=anchor["id"])
            )
        limit = query["limit"]
        page = list(listed.order_by("-created_at", "-id")[: limit + 1])
        return Response(
            {
                "results": [notifications.notification_data(n) for n in page[:limit]],
                "has_more": len(page) > limit,
                "unread_count": notifications.unread_count(request.user),
            }
        )


class NotificationReadView(APIView):
    """POST: mark one of the person's notifications read (again is fine)."""

    statuses = {"post": (200,)}
    inputs = {"post": ReadInput}
    permission_classes = [IsPerson]

    def post(self, request, notification_id):
        validated(ReadInput, request.data)
        notification = access_notification(request.user, notification_id)
        notification = notifications.mark_notification_read(request.user, notification)
        return Response(notifications.notification_data(notification))


class NotificationReadAllView(APIView):
    """POST: mark every notification of the person read."""

    statuses = {"post": (200,)}
    inputs = {"post": ReadInput}
    permission_classes = [IsPerson]

    def post(self, request):
        validated(ReadInput, request.data)
        marked = notifications.mark_all_notifications_read(request.user)
        return Response({"marked": marked, "unread_count": 0})


class NotificationSettingsView(APIView):
    """The person's notification settings: how often their unread ones are emailed."""

    is_collection = False  # one record at a path that reads like a list
    inputs = {"patch": DigestInput}
    permission_classes = [IsPerson]

    def get(self, request):
        return Response({"digest": request.user.digest})

    def patch(self, request):
        data = validated(DigestInput, request.data)
        user = notifications.set_digest(request.user, data["digest"])
        return Response({"digest": user.digest})


urlpatterns = [
    path("notifications/", NotificationListView.as_view()),
    path("notifications/read-all/", NotificationReadAllView.as_view()),
    path("notifications/settings/", NotificationSettingsView.as_view()),
    path("notifications/<uuid:notification_id>/read/", NotificationReadView.as_view()),
]
