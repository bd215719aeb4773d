"""The victim's world and the intruders of the tenant matrix (issue 27): Alice's team A with one
real row of every kind a URL can name, and everyone who must get nothing of it."""

from datetime import timedelta
from types import SimpleNamespace

from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.utils import timezone

from agents import actions as agent_actions
from agents import hosting as agent_hosting
from agents.models import AgentSession
from artifacts.actions import publish_artifact
from conversations import tasks
from conversations.actions import create_conversation, post_message, upload_attachment
from integrations import sources
from routines import actions as routine_actions
from routines import loops, reminders
from tests.conftest import make_cast, make_person
from tests.integrations.google_github_standin import connect
from tests.work.test_tool_frames import NOTE, note
from tests.work.tooling import held_message
from work import memory, skills
from work.actions import set_workspace_permission
from work.models import PermissionRequest
from work.tools.registry import REGISTRY, Tool, register
from workspaces import actions as workspace_actions
from workspaces.models import Notification

SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot used\n-----END OPENSSH PRIVATE KEY-----\n"
SKILL_MD = "---\nname: inbox-sort\ndescription: Sort an inbox. Use for email.\n---\n# Steps\n"


def build_world() -> SimpleNamespace:
    """Team A (Alice owns it, Bob is a member, Nova takes part in #general) with a row of each
    kind; Charlie with his own team B and agent Spy; Dora, in no workspace but her own."""
    cast = make_cast()
    alice, team_a, nova, channel = cast.alice, cast.team_a, cast.nova, cast.channel
    owner = team_a.memberships.get(user=alice)
    message = post_message(alice, channel, "The launch date is secret.")
    hosted_host = agent_hosting.create_host(
        workspace=team_a, name="edge-1", address="10.0.0.5", ssh_key=SSH_KEY
    )
    agent_hosting.place_agent(nova, hosted_host)
    # Replaced by the host token issued last (below): revoked, as a leaked old token would be.
    revoked_host_secret = agent_hosting.issue_host_token(hosted_host)
    skill = skills.create_skill(alice, skills.parse_skill_md(SKILL_MD))
    ids = {
        "workspace_id": team_a.id,
        "user_id": cast.bob.id,
        "conversation_id": channel.id,
        "message_id": message.id,
        "agent_id": nova.id,
        "task_id": tasks.create_task(alice, team_a, nova, "Look into it").id,
        "artifact_id": publish_artifact(nova, channel, "Plan", "markdown", "# Plan").id,
        "number": 1,
        "attachment_id": upload_attachment(
            alice, channel, SimpleUploadedFile("plan.csv", b"month,total\n")
        ).id,
        "credential_id": workspace_actions.create_credential(owner, "model", "sk-victim").id,
        "token_id": workspace_actions.issue_api_token(alice, "laptop")[0].id,
        "key_id": agent_actions.create_agent_key(nova)[0].id,
        "host_id": hosted_host.id,
        "skill_id": skill.id,
        "memory_id": memory.remember(nova, team_a.id, "Alice likes tea", user=alice).id,
        "routine_id": routine_actions.create_routine(
            alice, nova, team_a, name="Sweep", instructions="Sweep.", interval_minutes=60
        ).id,
        "loop_id": loops.start_loop(alice, nova, team_a, "Tidy the backlog").id,
        "reminder_id": reminders.set_reminder(
            nova, team_a, "Call the bank", timezone.now() + timedelta(days=1), user=alice
        ).id,
        "connection_id": connect("google", "ya29.victim", "alice@example.com", user=alice).id,
        "permission_id": set_workspace_permission(
            owner, tool="artifact_publish", decision="allow"
        ).id,
        "name": "artifact_publish",
        "provider": "google",
    }
    ids["source_id"] = sources.add_source(
        owner, kind="mcp", name="crm", url="https://crm.example.com/mcp"
    ).id
    ids["request_id"], ids["call_id"] = pending_approval(nova, channel, cast.bob)
    invitation, invitation_token = workspace_actions.create_invitation(owner)
    ids["invitation_id"] = invitation.id
    post_message(alice, channel, f"@{cast.bob.username} have a look")  # Bob's inbox gets it
    ids["notification_id"] = Notification.objects.filter(user=cast.bob).latest("created_at").id

    charlie = make_person("charlie")
    team_b = workspace_actions.create_team_workspace(charlie, "Team B")
    spy = agent_actions.create_agent(charlie, name="Spy", backend="scripted")
    create_conversation(charlie, team_b, kind="channel", title="b-general", agent_ids=[spy.id])
    # Team B's own host, serving Charlie's agent Warden: its supervisor token is no key to A's.
    b_host = agent_hosting.create_host(
        workspace=team_b, name="b-edge", address="10.0.0.6", ssh_key=SSH_KEY
    )
    warden = agent_actions.create_agent(charlie, name="Warden", backend="scripted")
    agent_hosting.place_agent(warden, b_host)
    dora = make_person("dora")

    revoked, revoked_secret = workspace_actions.issue_api_token(alice, "stolen")
    workspace_actions.revoke_api_token(revoked)
    _, key = agent_actions.create_agent_key(nova)
    expired_session, expired_secret = agent_actions.open_agent_session(key)
    AgentSession.objects.filter(pk=expired_session.pk).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    _, spy_key = agent_actions.create_agent_key(spy)
    _, spy_secret = agent_actions.open_agent_session(spy_key)

    return SimpleNamespace(
        **vars(cast),
        owner=owner,
        ids=ids,
        invitation_token=invitation_token,
        charlie=charlie,
        team_b=team_b,
        spy=spy,
        warden=warden,
        hosted_host=hosted_host,
        dora=dora,
        secrets={
            "outsider": workspace_actions.issue_api_token(dora)[1],
            "other_member": workspace_actions.issue_api_token(charlie)[1],
            "foreign_agent": spy_secret,
            "revoked_token": revoked_secret,
            "expired_session": expired_secret,
            "host_token": agent_hosting.issue_host_token(hosted_host),
            "placement_token": agent_hosting.issue_host_token(hosted_host, nova),
            "revoked_host_token": revoked_host_secret,
            "other_host_token": agent_hosting.issue_host_token(b_host),
            "agent_key": key,
        },
    )


def pending_approval(agent, conversation, author) -> tuple:
    """A tool call of AGENT's waiting for a person's decision: (its request's id, its id)."""
    tool = register(Tool("matrix_outside", "Post a note, from outside.", NOTE, "external", note))
    try:
        answer = held_message(agent, conversation, author).call(tool.name, {"text": "x"})
    finally:
        REGISTRY.pop(tool.name, None)  # the rows stay; the tool is no one else's
    request = PermissionRequest.objects.get(pk=answer.pending["request_id"])
    return request.id, request.call_id


def tables_checksum_sql() -> str:
    """One query over every table: its row count and latest updated_at (where it has one)."""
    with connection.cursor() as cursor:
        tables = connection.introspection.table_names(cursor)
        parts = []
        for table in sorted(tables):
            columns = {
                c.name for c in connection.introspection.get_table_description(cursor, table)
            }
            latest = "max(updated_at)::text" if "updated_at" in columns else "''"
            quoted = connection.ops.quote_name(table)
            parts.append(f"SELECT '{table}', count(*), {latest} FROM {quoted}")
    return " UNION ALL ".join(parts)


def checksum(sql: str) -> dict:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return {table: (count, latest) for table, count, latest in cursor.fetchall()}


def changed(before: dict, after: dict) -> dict:
    return {t: (before.get(t), after.get(t)) for t in after if before.get(t) != after.get(t)}
