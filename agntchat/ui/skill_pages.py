"""Pages of skills: the person's own layers and the platform's, and the instance's marketplace.
They only read: the page script adds, edits, publishes, deletes, installs and rates through the
REST API (work/skills_api.py), whose actions check every rule."""

from django.shortcuts import render
from django.utils.safestring import mark_safe

from agents.models import Agent
from agntchat.ui.shell import shell, workspace_page
from artifacts.rendering import render_markdown
from work import skills
from work.access import access_skill, skills_usable_by
from work.models import Skill

MAX_LISTED = 200


def my_agents(user):
    """The person's own agents, for "add to" and "install into" choices."""
    return list(Agent.objects.filter(owner=user).order_by("name"))


def add_skill_limits() -> dict:
    """What the add-a-skill form says and checks before sending a file."""
    return {"max_bytes": skills.MAX_PACKAGE_BYTES, "max_kb": skills.MAX_PACKAGE_BYTES // 1024}


def _rows(found):
    return [{"skill": s, "summary": skills.summary(s.description)} for s in found]


@workspace_page
def skill_list(request, membership):
    """The person's skills (their layer, then their agents'), and the platform's."""
    usable = skills.with_standing(
        skills_usable_by(request.user).select_related("agent", "installed_from"), request.user
    )
    rows = list(usable.order_by("name", "agent__name")[:MAX_LISTED])
    context = shell(
        request,
        membership,
        section="skills",
        mine=_rows(s for s in rows if s.layer == Skill.Layer.OWNER),
        agents_skills=_rows(s for s in rows if s.layer == Skill.Layer.AGENT),
        platform=_rows(s for s in rows if s.layer == Skill.Layer.PLATFORM),
        my_agents=my_agents(request.user),
        **add_skill_limits(),
    )
    return render(request, "skills/list.html", context)


@workspace_page
def marketplace(request, membership):
    q = request.GET.get("q", "")[:500]
    context = shell(
        request,
        membership,
        section="skills",
        q=q,
        results=_rows(skills.marketplace(request.user, q)[:MAX_LISTED]),
    )
    return render(request, "skills/marketplace.html", context)


@workspace_page
def marketplace_detail(request, membership, skill_id):
    """One published skill: its instructions rendered, its standing, rating and installing."""
    found = access_skill(request.user, skill_id, published=True)
    skill = skills.with_standing(
        Skill.objects.filter(pk=found.pk).select_related("owner"), request.user
    ).get()
    context = shell(
        request,
        membership,
        section="skills",
        skill=skill,
        summary=skills.summary(skill.description),
        # render_markdown sanitises (nh3): raw HTML in a body is shown as text, links are safe.
        body_html=mark_safe(render_markdown(skill.body)),
        is_mine=skill.owner_id == request.user.id,
        star_choices=range(1, 6),
        my_agents=my_agents(request.user),
    )
    return render(request, "skills/marketplace_detail.html", context)
