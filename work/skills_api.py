"""REST for skills (TOOL-2…4): a person's layer and their agents' layers, each agent's resolved
skills, and the instance's marketplace (publish, browse and search, install, rate)."""

import base64
import binascii

from django.urls import path
from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.access import access_own_agent
from agntchat.core.api import StrictSerializer, validated
from work import skills
from work.access import access_skill, skills_usable_by
from work.models import Skill
from workspaces.access import IsPerson

MAX_LISTED = 200


def skill_out(skill: Skill, *, full: bool = False) -> dict:
    out = {
        "id": skill.id,
        "layer": skill.layer,
        "name": skill.name,
        "description": skill.description,
        "summary": skills.summary(skill.description),
        "owner_id": skill.owner_id,
        "agent_id": skill.agent_id,
        "allowed_tools": skill.allowed_tools,
        "requires_tools": skill.requires_tools,
        "files": sorted(skill.files),
        "source_url": skill.source_url or None,
        "published": skill.published_at is not None,
        "published_at": skill.published_at,
        "installed_from_id": skill.installed_from_id,
        "created_at": skill.created_at,
        "updated_at": skill.updated_at,
    }
    if hasattr(skill, "rating_count"):
        out["stars"] = round(skill.stars, 2) if skill.stars is not None else None
        out["rating_count"] = skill.rating_count
        out["installs"] = skill.install_count
        out["my_stars"] = skill.my_stars
    if hasattr(skill, "granted_tools"):
        out["granted_tools"] = skill.granted_tools
    if full:
        out["body"] = skill.body
        out["skill_md"] = skill.source
    return out


class SkillQuery(serializers.Serializer):
    agent = serializers.UUIDField(required=False)
    layer = serializers.ChoiceField(choices=Skill.Layer.choices, required=False)


class SkillFromText(StrictSerializer):
    """The SKILL.md's text."""

    skill_md = serializers.CharField(max_length=skills.MAX_PACKAGE_BYTES)
    agent = serializers.UUIDField(required=False, help_text="Assign it to this agent of yours.")


class SkillFromUrl(StrictSerializer):
    """A URL to fetch the SKILL.md (or a zip of its folder) from, under web_fetch's rules."""

    url = serializers.RegexField(r"^[hH][tT][tT][pP][sS]?://[^/?#\s]+", max_length=2048)
    agent = serializers.UUIDField(required=False, help_text="Assign it to this agent of yours.")


class SkillFromFile(StrictSerializer):
    """The package file itself in base64: a SKILL.md or a zip."""

    package = serializers.CharField(max_length=skills.MAX_PACKAGE_BYTES * 4 // 3 + 4)
    agent = serializers.UUIDField(required=False, help_text="Assign it to this agent of yours.")


# Exactly one source: the schema says so (oneOf three closed objects).
SkillInput = PolymorphicProxySerializer(
    component_name="SkillInput",
    serializers=[SkillFromText, SkillFromUrl, SkillFromFile],
    resource_type_field_name=None,
)


def skill_input(data) -> dict:
    """DATA checked by the SkillInput its source names (text, when it names none)."""
    given = data if isinstance(data, dict) else {}
    chosen = SkillFromUrl if "url" in given else SkillFromFile if "package" in given else None
    return validated(chosen or SkillFromText, data)


class SkillChange(StrictSerializer):
    min_fields = 1
    skill_md = serializers.CharField(max_length=skills.MAX_PACKAGE_BYTES, required=False)
    published = serializers.BooleanField(required=False)


class InstallInput(StrictSerializer):
    agent = serializers.UUIDField(required=False, help_text="Into this agent's layer, not yours.")


class RatingInput(StrictSerializer):
    stars = serializers.IntegerField(min_value=1, max_value=5)


class MarketQuery(serializers.Serializer):
    q = serializers.CharField(max_length=500, required=False)


def package_of(data: dict) -> tuple[skills.Package, str]:
    """The Package a SkillInput names, and the URL it came from ("" if none)."""
    if "url" in data:
        return skills.fetch_package(data["url"]), data["url"]
    if "package" in data:
        try:
            raw = base64.b64decode(data["package"], validate=True)
        except (binascii.Error, ValueError):
            raise skills.SkillInvalid("package must be the file in base64.") from None
        return skills.read_package(raw), ""
    return skills.parse_skill_md(data["skill_md"]), ""


class SkillListView(APIView):
    """The skills the person sees outside the marketplace: the platform's, theirs and their
    agents'."""

    inputs = {"post": SkillInput}
    queries = {"get": SkillQuery}
    upstream = {"post": "The skill's URL could not be fetched, or did not hold a skill."}
    permission_classes = [IsPerson]

    def get(self, request):
        query = validated(SkillQuery, request.query_params.dict())
        found = skills_usable_by(request.user)
        if "layer" in query:
            found = found.filter(layer=query["layer"])
        if "agent" in query:
            found = found.filter(agent=access_own_agent(request.user, query["agent"]))
        rows = found.order_by("layer", "name")[:MAX_LISTED]
        return Response({"results": [skill_out(s) for s in rows]})

    def post(self, request):
        """Import a skill into one's own layer, or assign it to an agent (granting the tools
        it depends on)."""
        data = skill_input(request.data)
        agent = access_own_agent(request.user, data["agent"]) if "agent" in data else None
        package, url = package_of(data)
        skill = skills.create_skill(request.user, package, agent=agent, source_url=url)
        return Response(skill_out(skill, full=True), status=201)


class SkillDetailView(APIView):
    inputs = {"patch": SkillChange}
    permission_classes = [IsPerson]

    def get(self, request, skill_id):
        return Response(skill_out(access_skill(request.user, skill_id), full=True))

    def patch(self, request, skill_id):
        """New contents, or publish in (take out of) the marketplace: its owner only."""
        skill = access_skill(request.user, skill_id)
        data = validated(SkillChange, request.data)
        package = skills.parse_skill_md(data["skill_md"]) if "skill_md" in data else None
        skill = skills.update_skill(request.user, skill, package, published=data.get("published"))
        return Response(skill_out(skill, full=True))

    def delete(self, request, skill_id):
        skills.delete_skill(request.user, access_skill(request.user, skill_id))
        return Response(status=204)


class AgentSkillsView(APIView):
    """An agent's skills as it has them: by name, the layer that won, active or not (and the
    tools it misses), and what it shadows. Its owner only."""

    permission_classes = [IsPerson]

    def get(self, request, agent_id):
        agent = access_own_agent(request.user, agent_id)
        return Response(
            {
                "results": [
                    {
                        "name": r.skill.name,
                        "summary": skills.summary(r.skill.description),
                        "skill_id": r.skill.id,
                        "layer": r.skill.layer,
                        "active": r.active,
                        "missing_tools": r.missing,
                        "shadows": [{"skill_id": s.id, "layer": s.layer} for s in r.shadowed],
                    }
                    for r in skills.resolve(agent)
                ]
            }
        )


class MarketplaceView(APIView):
    """Published skills, best rated first, or ranked by how well they match Q."""

    queries = {"get": MarketQuery}
    permission_classes = [IsPerson]

    def get(self, request):
        query = validated(MarketQuery, request.query_params.dict())
        rows = skills.marketplace(request.user, query.get("q", ""))[:MAX_LISTED]
        return Response({"results": [skill_out(s) for s in rows]})


class MarketplaceDetailView(APIView):
    permission_classes = [IsPerson]

    def get(self, request, skill_id):
        skill = access_skill(request.user, skill_id, published=True)
        listed = skills.with_standing(Skill.objects.filter(pk=skill.pk), request.user).get()
        return Response(skill_out(listed, full=True))


class InstallView(APIView):
    inputs = {"post": InstallInput}
    permission_classes = [IsPerson]

    def post(self, request, skill_id):
        """A copy into one's own layer, or an agent's (assigning it)."""
        skill = access_skill(request.user, skill_id, published=True)
        data = validated(InstallInput, request.data)
        agent = access_own_agent(request.user, data["agent"]) if "agent" in data else None
        copy = skills.install_skill(request.user, skill, agent=agent)
        return Response(skill_out(copy, full=True), status=201)


class RatingView(APIView):
    inputs = {"put": RatingInput}
    permission_classes = [IsPerson]

    def put(self, request, skill_id):
        """One rating per person (rating again changes it); not one's own skill."""
        skill = access_skill(request.user, skill_id, published=True)
        data = validated(RatingInput, request.data)
        skills.rate_skill(request.user, skill, data["stars"])
        listed = skills.with_standing(Skill.objects.filter(pk=skill.pk), request.user).get()
        return Response(skill_out(listed))


urlpatterns = [
    path("skills/", SkillListView.as_view()),
    path("skills/<uuid:skill_id>/", SkillDetailView.as_view()),
    path("agents/<uuid:agent_id>/skills/", AgentSkillsView.as_view()),
    path("marketplace/skills/", MarketplaceView.as_view()),
    path("marketplace/skills/<uuid:skill_id>/", MarketplaceDetailView.as_view()),
    path("marketplace/skills/<uuid:skill_id>/install/", InstallView.as_view()),
    path("marketplace/skills/<uuid:skill_id>/rating/", RatingView.as_view()),
]
