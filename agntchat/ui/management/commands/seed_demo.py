"""Create demo data once (a person, their personal workspace, a team workspace); print the login."""

import secrets

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import transaction

from agents.actions import create_agent, create_agent_key
from agents.models import Agent, AgentKey
from agntchat.core.crypto import find_by_secret
from conversations.actions import create_conversation, post_message
from conversations.models import Conversation
from workspaces.actions import create_team_workspace
from workspaces.models import User, Workspace

DEMO_USERNAME = "demo"


def demo_password() -> str:
    """Generated once per checkout and kept under ./var, so the printed login stays valid."""
    path = settings.VAR_DIR / "demo_password"
    if not path.exists():
        settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(9))
        path.chmod(0o600)
    return path.read_text().strip()


class Command(BaseCommand):
    help = "Create the demo person and workspaces if they do not exist; print how to log in."

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
            scout = Agent.objects.filter(owner=user, handle="scout").first()
            if scout is None:
                scout = create_agent(
                    user,
                    name="Scout",
                    handle="scout",
                    role="demo assistant",
                    capabilities=["research", "writing"],
                    backend=Agent.Backend.SCRIPTED,
                )
            general = Conversation.objects.filter(
                workspace=team, kind=Conversation.Kind.CHANNEL, title="general"
            ).first()
            if general is None:
                general = create_conversation(
                    user,
                    team,
                    kind=Conversation.Kind.CHANNEL,
                    title="general",
                    agent_ids=[scout.id],
                )
                post_message(
                    user,
                    general,
                    "Welcome to the demo team. Say hi to @scout — it answers through a real bridge.",
                )
            self.ensure_key(scout)
        self.stdout.write(
            f"\n  agntchat is running at {url}\n  log in as: {DEMO_USERNAME} / {password}\n"
        )

    def ensure_key(self, agent) -> None:
        """The demo bridge's key, kept under ./var (a key is shown only once; we are its holder)."""
        path = settings.VAR_DIR / "demo_agent_key"
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
