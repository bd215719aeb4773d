"""REST for the public agent directory (AGT-7): an owner publishes, republishes and unpublishes
an agent's listing; anyone signed in lists and searches the directory, reads a listing and
clones it into an agent of their own."""

from django.urls import path
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agntchat.core.api import StrictSerializer, validated
from work import directory, skills
from work.access import access_listing, access_publishable_agent, own_listing
from work.api import HANDLE_ERRORS, agent_out
from work.models import AgentListing
from workspaces.access import IsPerson

MAX_LISTED = 200


def listing_out(listing: AgentListing, user) -> dict:
    """A listing as anyone signed in reads it: the snapshot's fields and nothing else (the
    source agent's id only for its owner)."""
    mine = listing.agent.owner_id == user.id
    out = {
        "id": listing.id,
        "name": listing.name,
        "handle": listing.handle,
        "description": listing.description,
        "role": listing.role,
        "capabilities": listing.capabilities,
        "personality": listing.personality,
        "backend": listing.backend,
        "model": listing.model,
        "turn_time_limit_seconds": listing.turn_time_limit_seconds,
        "skills": [
            {
                "name": s["name"],
                "description": s["description"],
                "summary": skills.summary(s["description"]),
                "allowed_tools": s["allowed_tools"],
                "requires_tools": s["requires_tools"],
                "files": sorted(s.get("files") or {}),
            }
            for s in _skills(listing)
        ],
        "author": {"id": listing.agent.owner_id, "name": listing.agent.owner.label},
        "mine": mine,
        "published": listing.published_at is not None,
        "published_at": listing.published_at,
        "updated_at": listing.updated_at,
    }
    if hasattr(listing, "clone_count"):
        out["clone_count"] = listing.clone_count
    if mine:
        out["agent_id"] = listing.agent_id
    return out


def _skills(listing: AgentListing) -> list[dict]:
    """The listing's skills, or their outlines when it was read with them (a list of many)."""
    outlines = getattr(listing, "skill_outlines", None)
    return listing.skills if outlines is None else outlines


class PublishInput(StrictSerializer):
    description = serializers.CharField(
        max_length=directory.DESCRIPTION_MAX,
        help_text="What the agent is for, shown in the directory.",
    )


class CloneInput(StrictSerializer):
    name = serializers.CharField(
        max_length=80, required=False, help_text="The clone's name; the listing's if not given."
    )
    handle = serializers.SlugField(
        max_length=40,
        required=False,
        error_messages=HANDLE_ERRORS,
        help_text="Given and taken among your agents: 409. Not given: the listing's handle, "
        "with -2, -3 … when you have it already.",
    )


class DirectoryQuery(serializers.Serializer):
    q = serializers.CharField(
        max_length=500, required=False, allow_blank=True, help_text="Words to search for."
    )
    sort = serializers.ChoiceField(choices=directory.SORTS, required=False, default="newest")


class ListingView(APIView):
    """An agent's listing in the directory: its owner's only (anyone else's agent is 404)."""

    is_collection = False  # one record at a path that reads like a list
    inputs = {"put": PublishInput}
    statuses = {"put": (200, 201)}
    permission_classes = [IsPerson]

    def get(self, request, agent_id):
        """The listing as published (or as it was, when unpublished since)."""
        agent = access_publishable_agent(request.user, agent_id)
        listing = directory.listing_standing(own_listing(agent))
        return Response(listing_out(listing, request.user))

    def put(self, request, agent_id):
        """Publish, or republish: the listing becomes a fresh snapshot of the agent. Refused
        (409) while the agent is pinned to a team workspace."""
        agent = access_publishable_agent(request.user, agent_id)
        data = validated(PublishInput, request.data)
        listing, created = directory.publish_agent(
            request.user, agent, description=data["description"]
        )
        out = listing_out(directory.listing_standing(listing), request.user)
        return Response(out, status=201 if created else 200)

    def delete(self, request, agent_id):
        """Out of the directory; clones already made are untouched."""
        agent = access_publishable_agent(request.user, agent_id)
        directory.unpublish_agent(agent)
        return Response(status=204)


class DirectoryView(APIView):
    """Published agents: the best match for ``q`` first, then newest or most cloned."""

    queries = {"get": DirectoryQuery}
    permission_classes = [IsPerson]

    def get(self, request):
        query = validated(DirectoryQuery, request.query_params.dict())
        found = directory.directory(query.get("q", ""), query["sort"])
        rows = directory.with_skill_outlines(found)[:MAX_LISTED]
        return Response({"results": [listing_out(listing, request.user) for listing in rows]})


class DirectoryDetailView(APIView):
    permission_classes = [IsPerson]

    def get(self, request, listing_id):
        listing = access_listing(request.user, listing_id)
        return Response(listing_out(directory.listing_standing(listing), request.user))


class CloneView(APIView):
    inputs = {"post": CloneInput}
    permission_classes = [IsPerson]

    def post(self, request, listing_id):
        """A new agent of yours made from the listing: its configuration, personality and copies
        of its skills; not pinned anywhere, no keys."""
        listing = access_listing(request.user, listing_id)
        data = validated(CloneInput, request.data)
        agent = directory.clone_listing(request.user, listing, **data)
        return Response(agent_out(agent, request.user, False), status=201)


urlpatterns = [
    path("agents/<uuid:agent_id>/listing/", ListingView.as_view()),
    path("directory/agents/", DirectoryView.as_view()),
    path("directory/agents/<uuid:listing_id>/", DirectoryDetailView.as_view()),
    path("directory/agents/<uuid:listing_id>/clone/", CloneView.as_view()),
]
