"""REST for streaming replies (issue 28): a person stops an agent's turn, or has a reply
written again."""

from django.urls import path
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agntchat.core.api import StrictSerializer, validated
from conversations import actions
from conversations.access import access_conversation, access_message
from workspaces.access import IsPerson


class StopInput(StrictSerializer):
    # The work item of the turn: the ``workId`` of its ``message.draft`` live events.
    work = serializers.UUIDField()


class StopView(APIView):
    """Stop an agent's turn in this conversation; its reply comes with what was written."""

    statuses = {"post": (202,)}
    inputs = {"post": StopInput}
    permission_classes = [IsPerson]

    def post(self, request, conversation_id):
        conversation = access_conversation(request.user, conversation_id)
        data = validated(StopInput, request.data)
        actions.stop_turn(request.user, conversation, data["work"])
        return Response({"stopping": True}, status=202)


class RegenerateView(APIView):
    """The same agent answers the same message again; the new reply is posted as usual."""

    statuses = {"post": (202,)}
    permission_classes = [IsPerson]

    def post(self, request, message_id):
        reply = access_message(request.user, message_id)
        actions.regenerate_reply(request.user, reply)
        return Response({"regenerating": True}, status=202)


urlpatterns = [
    path("conversations/<uuid:conversation_id>/stop/", StopView.as_view()),
    path("messages/<uuid:message_id>/regenerate/", RegenerateView.as_view()),
]
