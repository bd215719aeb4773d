"""Create demo data once (a person, their personal workspace, a team workspace, two scripted
agents and a finished example of what they do); print the login.

Everything is made through the actions a person's click or an agent's tool call runs, never by
writing rows: the sample looks and behaves as if Scout and Nova had done it live."""

import json
import secrets

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from agents.actions import create_agent, create_agent_key
from agents.models import Agent, AgentKey
from agntchat.core import claims
from agntchat.core.crypto import find_by_secret
from agntchat.ui import demo
from artifacts.actions import post_card, publish_artifact, update_artifact, use_card_action
from artifacts.card_library import SEED_TEMPLATES
from conversations import tasks, threads
from conversations.actions import add_agent_to_conversation, create_conversation, post_message
from conversations.models import Conversation, Delivery, Task
from workspaces.actions import create_team_workspace
from workspaces.models import User, Workspace

DEMO_USERNAME = "demo"
# Where each demo agent's bridge finds its key and its scripted table (the Procfile reads them).
KEY_FILES = {"scout": "demo_agent_key", "nova": "demo_nova_key"}
SEED_CONNECTION = "seed_demo"  # the sample's deliveries and task are held and acked as this


def demo_password() -> str:
    """Generated once per checkout and kept under ./var, so the printed login stays valid."""
    path = settings.VAR_DIR / "demo_password"
    if not path.exists():
        settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(9))
        path.chmod(0o600)
    return path.read_text().strip()


def options_path(handle: str):
    return settings.VAR_DIR / f"demo_{handle}.json"


class Command(BaseCommand):
    help = "Create the demo person, workspaces, agents and sample if missing; print the login."

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:8000")

    def handle(self, *args, url, **options):
        password = demo_password()
        call_command("load_platform_skills", stdout=self.stdout)
        with transaction.atomic():
            user = User.objects.filter(username=DEMO_USERNAME).first()
            if user is None:
                user = User.objects.create_user(
                    DEMO_USERNAME, "demo@example.com", password, display_name="Demo Person"
                )
            elif not user.check_password(password):
                user.set_password(password)
                user.save(update_fields=["password"])
            team = Workspace.objects.filter(
                owner=user, kind=Workspace.Kind.TEAM, name="Demo team"
            ).first()
            if team is None:
                team = create_team_workspace(user, "Demo team")
            scout, nova = (demo_agent(user, spec) for spec in demo.AGENTS)
            general = Conversation.objects.filter(
                workspace=team, kind=Conversation.Kind.CHANNEL, title="general"
            ).first()
            if general is None:
                general = create_conversation(
                    user,
                    team,
                    kind=Conversation.Kind.CHANNEL,
                    title="general",
                    agent_ids=[scout.id, nova.id],
                )
            for agent in (scout, nova):  # a #general from an older demo had Scout only
                if not general.participants.filter(agent=agent).exists():
                    add_agent_to_conversation(user, general, agent)
            if not general.messages.filter(body=demo.INTRO).exists():
                seed_sample(user, team, general, scout, nova)
        for spec, agent in zip(demo.AGENTS, (scout, nova), strict=True):
            self.ensure_key(agent, settings.VAR_DIR / KEY_FILES[spec["handle"]])
            options_path(spec["handle"]).write_text(json.dumps(spec["options"]))
        self.stdout.write(
            f"\n  agntchat is running at {url}\n  log in as: {DEMO_USERNAME} / {password}\n"
        )

    def ensure_key(self, agent, path) -> None:
        """A demo bridge's key, kept under ./var (a key is shown only once; we are its holder)."""
        if path.exists():
            secret = path.read_text().strip()
            key = find_by_secret(
                lambda key_hash: AgentKey.objects.filter(
                    key_hash=key_hash, agent=agent, revoked_at__isnull=True
                ).first(),
                AgentKey.objects,
                "key_hash",
                secret,
            )
            if key is not None:
                return
        _, secret = create_agent_key(agent, name="demo bridge")
        path.write_text(secret)
        path.chmod(0o600)


def demo_agent(user, spec) -> Agent:
    agent = Agent.objects.filter(owner=user, handle=spec["handle"]).first()
    if agent is None:
        agent = create_agent(
            user,
            name=spec["name"],
            handle=spec["handle"],
            role=spec["role"],
            capabilities=spec["capabilities"],
            backend=Agent.Backend.SCRIPTED,
        )
    return agent


def seed_sample(user, team, general, scout, nova) -> None:
    """One finished example of each thing the demo agents do, in #general, made by the same
    actions their tool calls run, with the intro last (the first thing a visitor reads)."""
    post_message(user, general, demo.WELCOME, wake=[])
    # A side thread, opened by Scout's <dm> tag, answered by Nova, resolved by Scout.
    asked = post_message(user, general, demo.THREAD_PROMPT, wake=[])
    origin = post_message(scout, general, demo.THREAD_OPENER, reply_to=asked, wake=[])
    thread = Conversation.objects.get(parent_message=origin, kind=Conversation.Kind.THREAD)
    post_message(nova, thread, demo.THREAD_ANSWER, wake=[])
    threads.resolve_thread(scout, thread, demo.THREAD_SUMMARY)
    # A result card with buttons, one of them pressed, and Scout's answer to the press.
    post_message(user, general, demo.CARD_PROMPT, wake=[])
    template = next(t for t in SEED_TEMPLATES if t["name"] == demo.VENUES_CARD["template"])
    card = post_card(scout, general, {"type": template["result_type"], **demo.VENUES_CARD})
    click = use_card_action(user, card, 0, "book")["work"]["id"]
    post_message(scout, general, demo.BOOKED, reply_to=general.messages.get(pk=click), wake=[])
    # An artifact in two versions.
    asked = post_message(user, general, demo.ARTIFACT_PROMPT, wake=[])
    note = publish_artifact(nova, general, demo.NOTE_TITLE, "markdown", demo.NOTE_V1)
    update_artifact(nova, note, demo.NOTE_V2, demo.NOTE_CHANGE)
    post_message(nova, general, demo.NOTE_REPLY, reply_to=asked, wake=[])
    # The sample's deliveries (the thread's opening for Nova, the click for Scout) are done:
    # acked as a bridge acks them, so the bridges do not act on them again.
    now = timezone.now()
    for agent in (scout, nova):
        held = claims.claim(Delivery, agent.id, SEED_CONNECTION, 100, now, 60)
        claims.ack_many(Delivery, held, SEED_CONNECTION, now)
    # A /task with its progress and its result (relayed into #general).
    post_message(user, general, demo.TASK_PROMPT)
    task = Task.objects.get(agent=nova, conversation=general, instructions=demo.TASK_INSTRUCTIONS)
    claims.claim(Task, nova.id, SEED_CONNECTION, 1, now, 300)
    tasks.mark_started(task.id)
    for step in demo.TASK_STEPS:
        tasks.record_event(task.id, {"kind": "progress", "message": step})
    tasks.record_result(
        task.id, "completed", connection_id=SEED_CONNECTION, result={"text": demo.TASK_RESULT}
    )
    post_message(user, general, demo.INTRO, wake=[])
