"""GET /api/v1/search/: full-text search over what the caller (a person, or an agent by its
session token) can see, the very search the agents' workspace_search tool runs (work/search.py)."""

from datetime import datetime, time, timedelta

from django.urls import path
from django.utils import timezone
from django.utils.dateparse import parse_date
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.access import workspaces_of_agent
from agents.models import Agent
from agntchat.core.api import validated
from conversations.access import access_conversation
from work import search
from workspaces.access import access_workspace
from workspaces.exceptions import WorkspaceNotFound


class MomentField(serializers.DateTimeField):
    """An ISO 8601 time, or a date alone: the start of that day in the caller's time zone, or
    with ``end_of_day`` the start of the next (so ``until=2026-05-01`` includes the 1st)."""

    default_error_messages = {"out_of_range": "Too late a day: the last one is 9999-12-30."}

    def __init__(self, *, end_of_day=False, **options):
        super().__init__(**options)
        self.end_of_day = end_of_day

    def to_internal_value(self, value):
        if isinstance(value, str) and len(value) == 10:
            try:
                day = parse_date(value)
            except ValueError:
                day = None
            if day is None:
                self.fail("invalid", format="YYYY-MM-DD or YYYY-MM-DDThh:mm[:ss][+HH:MM]")
            start = timezone.make_aware(datetime.combine(day, time.min))
            try:
                return start + timedelta(days=1) if self.end_of_day else start
            except OverflowError:  # the day after 9999-12-31
                self.fail("out_of_range")
        return super().to_internal_value(value)


class SearchQuery(serializers.Serializer):
    """Query parameters: text by nature, so not a StrictSerializer."""

    q = serializers.CharField(max_length=200, help_text='Words; "phrases", or, -word.')
    workspace = serializers.UUIDField(required=False)
    conversation = serializers.UUIDField(required=False)
    author = serializers.UUIDField(required=False, help_text="A person's or an agent's id.")
    since = MomentField(required=False)
    until = MomentField(required=False, end_of_day=True)
    type = serializers.ChoiceField(choices=search.KINDS, required=False)
    page = serializers.IntegerField(
        min_value=1, max_value=search.MAX_OFFSET, default=1, help_text="As deep as 1000 results."
    )
    limit = serializers.IntegerField(min_value=1, max_value=50, default=20)

    def validate(self, data):
        if "since" in data and "until" in data and data["since"] >= data["until"]:
            raise serializers.ValidationError({"until": "Must be after since."})
        if (data["page"] - 1) * data["limit"] >= search.MAX_OFFSET:
            last = -(-search.MAX_OFFSET // data["limit"])
            raise serializers.ValidationError({"page": f"Results go {last} pages deep at most."})
        return data


def filters_for(actor, query: dict) -> search.Filters:
    """The validated QUERY as search filters; a workspace or conversation ACTOR cannot see is
    not found (404), never an empty list that says it exists."""
    filters = search.Filters(
        kinds=(query["type"],) if query.get("type") else search.KINDS,
        author_id=query.get("author"),
        since=query.get("since"),
        until=query.get("until"),
    )
    if query.get("workspace"):
        if isinstance(actor, Agent):
            if not workspaces_of_agent(actor).filter(pk=query["workspace"]).exists():
                raise WorkspaceNotFound()
            filters.workspace_id = query["workspace"]
        else:
            filters.workspace_id = access_workspace(actor, query["workspace"]).id
    if query.get("conversation"):
        filters.conversation_id = access_conversation(actor, query["conversation"]).id
    return filters


class SearchView(APIView):
    """GET: messages, artifacts and tasks matching ``q`` that the caller can see, best first,
    a page at a time (``page``, ``limit``), narrowed by workspace, conversation, author (a
    person's or an agent's id), time (``since``, ``until``: ISO 8601 times or dates) and type."""

    queries = {"get": SearchQuery}

    def get(self, request):
        query = validated(SearchQuery, request.query_params.dict())
        filters = filters_for(request.user, query)
        limit = query["limit"]
        hits, has_more = search.search(
            request.user, query["q"], filters, limit=limit, offset=(query["page"] - 1) * limit
        )
        return Response(
            {
                "results": [search.hit_data(h) for h in hits],
                "page": query["page"],
                "has_more": has_more,
            }
        )


urlpatterns = [path("search/", SearchView.as_view())]
