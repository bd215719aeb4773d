"""Pages of the public agent directory (AGT-7): browse and search, one listing with its Clone
button. They only read: the page script publishes, unpublishes and clones through the REST API
(work/directory_api.py), whose actions check every rule."""

from django.shortcuts import render

from agntchat.ui.shell import shell, workspace_page
from work import directory, skills
from work.access import access_listing, own_listing

MAX_LISTED = 200
SORT_LABELS = {"newest": "Newest first", "clones": "Most cloned first"}


def _skill_rows(listing):
    return [{**s, "summary": skills.summary(s["description"])} for s in listing.skills]


@workspace_page
def agent_directory(request, membership):
    q = request.GET.get("q", "")[:500]
    sort = request.GET.get("sort", "newest")
    if sort not in directory.SORTS:
        sort = "newest"
    context = shell(
        request,
        membership,
        section="directory",
        q=q,
        sort=sort,
        sorts=SORT_LABELS,
        sort_label=SORT_LABELS[sort],
        # Each listing's skills as outlines: the page counts them, it shows no SKILL.md.
        results=list(directory.with_skill_outlines(directory.directory(q, sort))[:MAX_LISTED]),
    )
    return render(request, "directory/list.html", context)


@workspace_page
def listing_detail(request, membership, listing_id):
    """One published listing: what a clone gets, and the button that makes one."""
    listing = directory.listing_standing(access_listing(request.user, listing_id))
    context = shell(
        request,
        membership,
        section="directory",
        listing=listing,
        listing_skills=_skill_rows(listing),
        is_mine=listing.agent.owner_id == request.user.id,
    )
    return render(request, "directory/listing.html", context)


def owner_extras(agent) -> dict:
    """The agent page's Directory panel, for its owner: the listing (if ever published), its
    clone count, and whether a team pin stands in the way (AGT-7)."""
    listing = own_listing(agent, required=False)
    return {
        "listing": directory.listing_standing(listing) if listing else None,
        "pinned_to_team": directory.pinned_to_team(agent),
    }
