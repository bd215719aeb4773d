"""An approval in the inbox: its item leads to the approval prompt's message, offers Approve and
Deny to those who may decide (the server says who), and once the request is decided anywhere
(or expires) says how it ended, read, for every decider, an open inbox being told at once
(``notification.updated``). Alice owns Team A and Nova; Bob, a member, is made admin to decide
too; Charlie, of Team B, sees nothing of it. Real database and Redis."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone

from conversations import actions
from tests.socket_helpers import TopicInbox
from work import approvals
from work.models import PermissionRequest, ToolCall
from workspaces import actions as workspace_actions
from workspaces.models import Notification

pytestmark = pytest.mark.django_db(transaction=True)

ASKING = "Nova asks to use send_email: approve or deny"


def make_admin(workspace, user):
    owner = workspace.memberships.get(role="owner")
    workspace_actions.change_role(owner, workspace.memberships.get(user=user), "admin")


@pytest.fixture
def asked(alice, bob, channel, nova):
    """Bob, an admin, and Alice ask Nova for something in #general; Nova's answer waits on
    send_email."""
    make_admin(channel.workspace, bob)
    message = actions.post_message(alice, channel, "@nova mail the venue", wake=[])
    return ask(nova, channel, message, "c-1"), message


def ask(nova, channel, message, call_id):
    """Nova's send_email call answering MESSAGE, waiting for a person: its request."""
    with transaction.atomic():
        call = ToolCall.objects.create(
            agent=nova,
            workspace=channel.workspace,
            conversation=channel,
            message=message,
            call_id=call_id,
            tool="send_email",
            arguments={},
            arguments_hash=call_id,
            risk="external",
            status=ToolCall.Status.WAITING,
        )
        return approvals.request_permission(call)


def items(user) -> list[tuple[str, bool]]:
    """USER's approval items: (text, read)."""
    return [
        (n.text, n.read_at is not None)
        for n in Notification.objects.filter(user=user, kind="approval").order_by("created_at")
    ]


def inbox_page(user, workspace) -> tuple[int, str]:
    client = Client()
    client.force_login(user)
    page = client.get(f"/w/{workspace.id}/inbox/")
    return page.status_code, page.content.decode()


def buttons_for(request) -> str:
    return f'data-approval="{request.id}"'


def test_the_item_leads_to_the_message_where_the_prompt_shows(alice, asked, channel):
    request, message = asked
    item = Notification.objects.get(user=alice, target_id=request.id)
    assert item.link == f"/w/{channel.workspace_id}/c/{channel.id}/#msg-{message.id}"
    # Not about the message: its edits and reading the conversation leave the approval be.
    assert item.message_id is None and item.conversation_id is None


def test_deciding_rewrites_each_deciders_item_and_tells_their_open_inbox(
    alice, bob, charlie, team_b, asked, api
):
    request, _ = asked
    assert items(alice) == items(bob) == [(ASKING, False)]
    bobs, charlies = TopicInbox(f"user.{bob.id}"), TopicInbox(f"user.{charlie.id}")

    approvals.decide_permission(alice, request, approve=True)

    done = "Nova asked to use send_email: approved by alice"
    assert items(alice) == items(bob) == [(done, True)]
    heard = [m["event"] for m in bobs.all(quiet=0.5) if m.get("type") == "live.event"]
    assert [e["type"] for e in heard] == ["notification.read", "notification.updated"]
    # The new text as REST lists it, read.
    (listed,) = api(bob).get("/api/v1/notifications/").json()["results"]
    assert heard[-1]["notifications"] == [listed]
    assert listed["text"] == done and listed["readAt"] is not None
    assert [m for m in charlies.all(quiet=0.3) if m.get("type") == "live.event"] == []


def test_a_denial_and_an_expiry_say_so(alice, bob, asked, channel, nova):
    request, message = asked
    approvals.decide_permission(bob, request, approve=False)
    assert items(alice) == [("Nova asked to use send_email: denied by bob", True)]

    ask(nova, channel, message, "c-2")
    approvals.expire_permission_requests(now=timezone.now() + timedelta(days=1))
    assert items(bob)[-1] == ("Nova asked to use send_email: expired before anyone decided", True)


def test_the_inbox_page_offers_approve_and_deny_while_it_waits(alice, asked, team_a):
    request, _ = asked
    status, html = inbox_page(alice, team_a)
    assert status == 200 and buttons_for(request) in html
    assert "data-inbox-decide=" in html

    approvals.decide_permission(alice, request, approve=True)
    status, html = inbox_page(alice, team_a)
    assert status == 200 and buttons_for(request) not in html
    assert "Nova asked to use send_email: approved by alice" in html


def test_one_who_may_no_longer_decide_gets_no_buttons_and_is_refused(
    alice, bob, asked, team_a, api
):
    """Bob was an admin when Nova asked; now a member, the page offers him nothing and the
    server refuses his decision, which changes nothing."""
    request, _ = asked
    owner = team_a.memberships.get(user=alice)
    workspace_actions.change_role(owner, team_a.memberships.get(user=bob), "member")
    status, html = inbox_page(bob, team_a)
    assert status == 200 and ASKING in html and buttons_for(request) not in html

    refused = api(bob).post(
        f"/api/v1/permission-requests/{request.id}/decision/",
        {"decision": "approve"},
        format="json",
    )
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "not_a_decider"
    request.refresh_from_db()
    assert request.status == PermissionRequest.Status.PENDING
    assert items(alice) == items(bob) == [(ASKING, False)]


def test_another_workspaces_person_finds_nothing(alice, charlie, team_a, team_b, asked, api):
    request, _ = asked
    refused = api(charlie).post(
        f"/api/v1/permission-requests/{request.id}/decision/", {"decision": "deny"}, format="json"
    )
    assert refused.status_code == 404
    assert inbox_page(charlie, team_a)[0] == 404
    status, html = inbox_page(charlie, team_b)
    assert status == 200 and "send_email" not in html
    assert approvals.decidable(charlie, [request.id]) == set()
    request.refresh_from_db()
    assert request.status == PermissionRequest.Status.PENDING
    assert items(alice) == [(ASKING, False)]
