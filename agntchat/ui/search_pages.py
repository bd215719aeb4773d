"""The search page: what the person can see in this workspace matching their words, through
the same search as the REST API and the agents' workspace_search tool (work/search.py)."""

from django.db.models import prefetch_related_objects
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode
from rest_framework.exceptions import ValidationError

from agents.access import agents_visible_in
from agntchat.core.exceptions import RateLimited
from agntchat.ui.shell import conversation_label, listed_in_sidebar, shell, workspace_page
from work import search
from work.search_api import SearchQuery, filters_for

PER_PAGE = 20
FILTERS = ("q", "conversation", "author", "since", "until", "type")


def _link(workspace_id, hit: search.Hit) -> str:
    if hit.kind == "message":
        url = reverse("conversation", args=[workspace_id, hit.conversation.id])
        return f"{url}#msg-{hit.id}"
    if hit.kind == "artifact":
        return reverse("artifact", args=[workspace_id, hit.id])
    return reverse("task", args=[workspace_id, hit.id])


def _page_url(request, page: int) -> str:
    kept = {k: request.GET[k] for k in FILTERS if request.GET.get(k)}
    return f"{request.path}?{urlencode(kept | {'page': page})}"


@workspace_page
def search_page(request, membership):
    workspace = membership.workspace
    asked = {k: v for k, v in request.GET.items() if k in (*FILTERS, "page") and v != ""}
    hits, has_more, errors, page, status = [], False, {}, 1, 400
    if asked.get("q", "").strip():
        form = SearchQuery(data=asked | {"workspace": str(workspace.id), "limit": PER_PAGE})
        try:
            form.is_valid(raise_exception=True)
            query = form.validated_data
            page = query["page"]
            hits, has_more = search.search(
                request.user,
                query["q"],
                filters_for(request.user, query),
                limit=PER_PAGE,
                offset=(page - 1) * PER_PAGE,
            )
        except ValidationError as exc:
            errors = {k: " ".join(str(m) for m in v) for k, v in exc.detail.items()}
        except RateLimited as exc:
            errors, status = {"q": exc.message}, 429
    conversations = [h.conversation for h in hits if h.conversation is not None]
    prefetch_related_objects(conversations, "participants__user", "participants__agent")
    rows = [
        {
            "hit": h,
            "parts": h.parts(),
            "url": _link(workspace.id, h),
            "where": conversation_label(h.conversation, request.user) if h.conversation else "",
        }
        for h in hits
    ]
    in_sidebar = listed_in_sidebar(request.user, workspace).prefetch_related(
        "participants__user", "participants__agent"
    )
    choices = sorted(
        ((str(c.id), conversation_label(c, request.user), c.kind) for c in in_sidebar),
        key=lambda c: (c[2] != "channel", c[1].lower()),
    )
    context = shell(
        request,
        membership,
        section="search",
        asked=asked,
        rows=rows,
        errors=errors,
        rate_limited=status == 429,
        page=page,
        previous_url=_page_url(request, page - 1) if page > 1 else "",
        next_url=_page_url(request, page + 1) if has_more else "",
        conversations=choices,
        people=workspace.memberships.select_related("user").order_by("user__username"),
        agents=agents_visible_in(workspace.id).order_by("name"),
        kinds=search.KINDS,
    )
    return render(request, "ui/search.html", context, status=status if errors else 200)
