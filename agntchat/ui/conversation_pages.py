"""Pages of conversations: the conversation, its settings, new channels and direct messages,
artifacts; and the HTML fragments the page script fetches (messages, read marks).

Views are thin: parse, access_*, an existing action, render. Messages are sent through the
REST API by the page script; these views only read, except the few forms below that call
``conversations.actions`` directly.
"""

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET, require_POST

from agents.access import access_agent, agent_appears_in, agents_visible_in
from agntchat.core.exceptions import AppError
from agntchat.core.ids import as_uuid
from agntchat.ui.messages import message_rows, slash_commands, visible_messages
from agntchat.ui.shell import (
    agent_presence,
    conversation_label,
    mention_targets,
    not_found_is_404,
    shell,
    workspace_page,
)
from artifacts.access import access_artifact, access_version, comments_of
from artifacts.models import Artifact
from artifacts.rendering import diff_versions
from conversations import actions
from conversations.access import access_conversation, conversations_visible_to, may_configure
from conversations.caps import cap_for, is_capped
from conversations.drafts import drafts_in
from conversations.exceptions import ConversationRule
from conversations.models import Conversation
from conversations.threads import DEFAULT_WORDING, IDLE_MINUTES
from integrations import telegram
from workspaces.access import access_member
from workspaces.exceptions import NotAllowed

PAGE = 50
MAX_FRAGMENT_IDS = 200
KIND_LABELS = {"markdown": "Document", "html": "Web page", "code": "Code", "json": "JSON data"}


def _conversation_in(membership, conversation_id) -> Conversation:
    """A conversation the person may read, in the workspace of the URL (or not found)."""
    conversation = access_conversation(membership.user, conversation_id)
    if conversation.workspace_id != membership.workspace_id:
        raise Http404
    return conversation


def _participants(conversation):
    rows = list(conversation.participants.select_related("user", "agent").order_by("created_at"))
    agents = [p.agent for p in rows if p.agent_id]
    online = agent_presence(agents)
    return {
        "people": [p.user for p in rows if p.user_id],
        "agents": [{"agent": a, "online": online[a.id]} for a in agents],
    }


@workspace_page
def conversation(request, membership, conversation_id):
    conversation = _conversation_in(membership, conversation_id)
    newest = list(
        visible_messages(request.user)
        .filter(conversation=conversation)
        .order_by("-created_at", "-id")[:PAGE]
    )[::-1]
    participants = _participants(conversation)
    taking_part = {row["agent"].id for row in participants["agents"]}
    addable = [
        a
        for a in agents_visible_in(membership.workspace_id).order_by("name")
        if a.id not in taking_part
    ]
    context = shell(
        request,
        membership,
        current=conversation,
        conversation=conversation,
        label=conversation_label(conversation, request.user),
        rows=message_rows(newest, request.user),
        has_more=len(newest) == PAGE,
        participants=participants,
        addable_agents=addable,
        removable_agents=[
            row["agent"]
            for row in participants["agents"]
            if conversation.kind == Conversation.Kind.CHANNEL
            and actions.may_remove_agent(membership, conversation, row["agent"])
        ],
        capped=is_capped(conversation),
        cap=cap_for(conversation),
        can_configure=may_configure(membership, conversation),
        mentions=mention_targets(membership.workspace),
        slash_commands=slash_commands([row["agent"] for row in participants["agents"]]),
        parent=conversation.parent_message,
        # Named and linked only for who may read it (an agent's owner reads its side threads,
        # not always the conversation they hang off).
        parent_readable=conversation.parent_message_id is not None
        and conversations_visible_to(request.user)
        .filter(messages__id=conversation.parent_message_id)
        .exists(),
        attach_accept=",".join(f".{e}" for e in settings.FILE_UPLOAD_EXTENSIONS),
        drafts=drafts_in(conversation.id),  # streaming replies under way (issue 28)
    )
    return render(request, "conversations/conversation.html", context)


@workspace_page
def conversation_settings(request, membership, conversation_id):
    conversation = _conversation_in(membership, conversation_id)
    settings = conversation.settings or {}
    agents = list(
        agents_visible_in(membership.workspace_id).filter(participations__conversation=conversation)
    )
    rank = {a: i for i, a in enumerate(settings.get("fallback_order", []))}
    agents.sort(key=lambda a: (rank.get(str(a.id), len(rank)), a.name.lower()))
    context = shell(
        request,
        membership,
        current=conversation,
        conversation=conversation,
        label=conversation_label(conversation, request.user),
        can_configure=may_configure(membership, conversation),
        rulebook=settings.get("rulebook", {}),
        loop_guard=settings.get("loop_guard", {}),
        side_threads=settings.get("side_threads", {}),
        fallback_agents=agents,
        cap=cap_for(conversation),
        default_wording=DEFAULT_WORDING,
        default_idle=IDLE_MINUTES,
        **_telegram(membership, conversation),
    )
    return render(request, "conversations/settings.html", context)


def _telegram(membership, conversation) -> dict:
    """The conversation's Telegram link (docs/telegram.md): its state, and who may unlink it."""
    link = telegram.links_of(conversation).select_related("created_by").first()
    return {
        "telegram_bot": telegram.bot_of(conversation.workspace_id),
        "telegram_link": link,
        "can_unlink": link is not None
        and (link.created_by_id == membership.user_id or may_configure(membership, conversation)),
    }


@workspace_page
def new_channel(request, membership):
    """A channel is open to every member; the agents chosen here take part and answer in it."""
    workspace = membership.workspace
    agents = list(agents_visible_in(workspace.id).order_by("name"))
    error = None
    if request.method == "POST":
        title = (request.POST.get("title") or "").strip().lstrip("#")
        chosen = request.POST.getlist("agents")
        if not title:
            error = "Give the channel a name, for example “general”."
        else:
            try:
                created = actions.create_conversation(
                    request.user, workspace, kind="channel", title=title[:200], agent_ids=chosen
                )
            except AppError as exc:
                error = exc.message
            else:
                return redirect(
                    "conversation", workspace_id=workspace.id, conversation_id=created.id
                )
    context = shell(request, membership, section="new-channel", agents=agents, error=error)
    return render(request, "conversations/new_channel.html", context)


@workspace_page
def direct(request, membership):
    """Pick someone to talk to; POST opens the existing conversation or starts one."""
    workspace = membership.workspace
    if request.method == "POST":
        agent_id, user_id = request.POST.get("agent"), request.POST.get("person")
        agent = person = None
        if agent_id:
            agent = access_agent(request.user, agent_id)
            if not agent_appears_in(agent, workspace.id):
                raise Http404
        elif user_id:
            person = access_member(membership, user_id).user
        else:
            raise Http404
        found, _ = actions.open_direct(
            request.user,
            workspace,
            agent_ids=[agent.id] if agent else [],
            user_ids=[person.id] if person else [],
        )
        return redirect("conversation", workspace_id=workspace.id, conversation_id=found.id)
    agents = list(agents_visible_in(workspace.id).order_by("name"))
    online = agent_presence(agents)
    context = shell(
        request,
        membership,
        section="direct",
        agents=[{"agent": a, "online": online[a.id]} for a in agents],
        people=[
            m.user
            for m in workspace.memberships.select_related("user").order_by("user__username")
            if m.user_id != request.user.id
        ],
    )
    return render(request, "conversations/direct.html", context)


@require_POST
@workspace_page
def add_agent(request, membership, conversation_id):
    """Bring an agent that appears in this workspace into the conversation."""
    conversation = _conversation_in(membership, conversation_id)
    agent = access_agent(request.user, request.POST.get("agent"))
    try:
        actions.add_agent_to_conversation(request.user, conversation, agent)
    except ConversationRule as exc:  # a readable refusal; NotFound stays a 404
        messages.error(request, exc.message)
    else:
        messages.success(request, f"{agent.name} now takes part in this conversation.")
    return redirect(
        "conversation", workspace_id=membership.workspace_id, conversation_id=conversation.id
    )


@require_POST
@workspace_page
def remove_agent(request, membership, conversation_id):
    """Take an agent out of a channel (its creator, a workspace admin or the agent's owner)."""
    conversation = _conversation_in(membership, conversation_id)
    try:
        agent = actions.remove_agent_from_conversation(
            request.user, conversation, request.POST.get("agent")
        )
    except (ConversationRule, NotAllowed) as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"{agent.name} no longer takes part in this conversation.")
    return redirect(
        "conversation", workspace_id=membership.workspace_id, conversation_id=conversation.id
    )


@require_GET
@not_found_is_404
def message_fragments(request):
    """``?ids=a,b,c``: those messages rendered as list items, in that order (unknown or
    invisible ids are left out; none visible is a 404)."""
    ids = [as_uuid(i) for i in request.GET.get("ids", "").split(",")[:MAX_FRAGMENT_IDS]]
    ids = [i for i in ids if i is not None]
    found = {m.id: m for m in visible_messages(request.user).filter(pk__in=ids)}
    ordered = [found[i] for i in ids if i in found]
    if not ordered:
        raise Http404
    return render(
        request,
        "conversations/_messages.html",
        {"rows": message_rows(ordered, request.user), "user": request.user},
    )


@require_POST
@not_found_is_404
def mark_read(request, conversation_id):
    actions.mark_read(request.user, access_conversation(request.user, conversation_id))
    return HttpResponse(status=204)


@workspace_page
def artifact(request, membership, artifact_id):
    """An artifact: a version rendered safely, its history, a diff between two versions and
    comments. Pages render inside a sandboxed frame, never inline."""
    found = access_artifact(request.user, artifact_id)
    if found.conversation.workspace_id != membership.workspace_id:
        raise Http404
    # The history shows who and when, not each version's text (up to 500 KB, twice).
    versions = list(
        found.versions.defer("content", "rendered").select_related("author_user", "author_agent")
    )
    number = _int(request.GET.get("v")) or found.current_version
    shown = access_version(found, number)
    rendered = shown.rendered  # rendered and sanitised once, when stored
    diff = None
    first, second = _int(request.GET.get("from")), _int(request.GET.get("to"))
    if first and second:
        old, new = access_version(found, first), access_version(found, second)
        diff = diff_versions(old.content, new.content, f"v{old.number}", f"v{new.number}")
        diff["html"] = mark_safe(diff["html"])  # rendering.diff_versions escapes every line
        diff["from"], diff["to"] = old.number, new.number
    elif len(versions) > 1:
        first, second = versions[-2].number, versions[-1].number
    context = shell(
        request,
        membership,
        current=found.conversation,
        artifact=found,
        kind_label=KIND_LABELS.get(found.kind, found.kind),
        versions=versions[::-1],
        shown=shown,
        is_page=found.kind == Artifact.Kind.HTML,
        # Sanitised HTML: inline for documents and code; a page goes into <iframe srcdoc sandbox>.
        rendered=mark_safe(rendered) if found.kind != Artifact.Kind.HTML else rendered,
        diff=diff,
        diff_from=first,
        diff_to=second,
        comments=comments_of(found),
        conversation=found.conversation,
        label=conversation_label(found.conversation, request.user),
    )
    return render(request, "conversations/artifact.html", context)


def _int(value):
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None
