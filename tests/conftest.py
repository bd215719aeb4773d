"""The cast every test story uses, built through actions like real people would.

Alice owns team workspace A, Bob is a member of A, Charlie is an outsider with his own team B.
"""

from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from workspaces import actions as workspace_actions
from workspaces.models import User


class QuickPasswordHasher(PBKDF2PasswordHasher):
    """PBKDF2 as in production, with few rounds: a million rounds per person made is most of
    what building the cast costs. Same algorithm name, so the servers that tests start (with
    the production hasher) still check these passwords."""

    iterations = 1000


def empty_tables_with_delete(ops_class):
    """After each transactional test Django empties every table with one TRUNCATE, which makes
    new files for each of our ~60 tables and their indexes: about a second per test, a quarter
    of the suite's time. DELETE of a test's few rows takes milliseconds. Django's foreign keys
    are DEFERRABLE INITIALLY DEFERRED and flush runs in one transaction, so the order of the
    tables does not matter. Sequence resets (asked by no test here) still go through TRUNCATE."""
    truncate = ops_class.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade:
            return truncate(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        return [f"DELETE FROM {self.quote_name(table)};" for table in tables]

    ops_class.sql_flush = sql_flush


def pytest_configure(config):
    from django.db.backends.postgresql.operations import DatabaseOperations

    settings.PASSWORD_HASHERS = ["tests.conftest.QuickPasswordHasher"]
    empty_tables_with_delete(DatabaseOperations)


def make_person(username: str) -> User:
    email = f"{username}@example.com"  # the cast's addresses are theirs (verified)
    return User.objects.create_user(
        username, email, "pw-" + username + "-123456", verified_email=email
    )


@pytest.fixture
def alice(db):
    return make_person("alice")


@pytest.fixture
def bob(db):
    return make_person("bob")


@pytest.fixture
def charlie(db):
    return make_person("charlie")


def make_team_a(alice, bob):
    workspace = workspace_actions.create_team_workspace(alice, "Team A")
    owner = workspace.memberships.get(user=alice)
    _, token = workspace_actions.create_invitation(owner)
    workspace_actions.accept_invitation(bob, token)
    return workspace


@pytest.fixture
def team_a(alice, bob):
    return make_team_a(alice, bob)


@pytest.fixture
def team_b(charlie):
    return workspace_actions.create_team_workspace(charlie, "Team B")


def client_for(user) -> APIClient:
    """A REST client authenticated the way API users are: a personal bearer token."""
    _, secret = workspace_actions.issue_api_token(user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


@pytest.fixture
def api():
    return client_for


def agent_session(agent) -> str:
    """A live session token for an agent, obtained the way a bridge does: key → session."""
    from agents import actions as agent_actions

    _, key = agent_actions.create_agent_key(agent)
    _, token = agent_actions.open_agent_session(key)
    return token


def make_nova(alice):
    from agents import actions as agent_actions

    return agent_actions.create_agent(
        alice, name="Nova", role="researcher", capabilities=["research"], backend="scripted"
    )


@pytest.fixture
def nova(alice):
    """Alice's agent, visible in all her workspaces."""
    return make_nova(alice)


def make_general(alice, team_a, nova):
    from conversations.actions import create_conversation

    return create_conversation(
        alice,
        team_a,
        kind="channel",
        title="general",
        user_ids=[team_a.memberships.get(role="member").user_id],
        agent_ids=[nova.id],
    )


@pytest.fixture
def channel(alice, team_a, nova):
    """#general in team A with Alice, Bob and Nova taking part."""
    return make_general(alice, team_a, nova)


@pytest.fixture
def budget_room(alice, bob, team_a):
    """Alice's #room in team A with Bob, his finance agent Rex and her generalist Gus: a
    budget question queues Rex, then Gus. (conversation, rex, gus)"""
    from agents import actions as agent_actions
    from conversations.actions import create_conversation

    rex = agent_actions.create_agent(
        bob, name="Rex", capabilities=["finance", "budget"], backend="scripted"
    )
    gus = agent_actions.create_agent(
        alice, name="Gus", role="generalist", capabilities=["general"], backend="scripted"
    )
    conversation = create_conversation(
        alice, team_a, kind="channel", title="room", user_ids=[bob.id], agent_ids=[gus.id, rex.id]
    )
    return conversation, rex, gus


def make_cast() -> SimpleNamespace:
    """Alice, Bob, team A, Nova and #general, as the fixtures above make them: for data built
    once per module (``built_once``), where the function-scoped fixtures cannot be used."""
    alice, bob = make_person("alice"), make_person("bob")
    team_a = make_team_a(alice, bob)
    nova = make_nova(alice)
    return SimpleNamespace(
        alice=alice, bob=bob, team_a=team_a, nova=nova, channel=make_general(alice, team_a, nova)
    )


def built_once(django_db_blocker, build):
    """For a module-scoped fixture (``yield from``): what BUILD makes, in rows committed once for
    the whole module and flushed away when the module is done, as a transactional test's rows
    are after it.

    The module's tests must each run in a transaction that is rolled back (plain ``django_db``,
    not ``transaction=True``, whose flush would take the rows away after the first test), and
    take the cast from what BUILD made, not from the function-scoped fixtures: each then sees
    the rows, none sees another's changes."""
    try:
        with django_db_blocker.unblock():
            made = build()
        yield made
    finally:
        with django_db_blocker.unblock():
            call_command("flush", interactive=False, verbosity=0)


@pytest.fixture(scope="session", autouse=True)
def close_pools_before_teardown(django_db_setup, django_db_blocker):
    """Socket tests touch the database from worker threads: hand every pooled connection back
    before pytest-django drops the test database."""
    yield
    from django.db import connections

    with django_db_blocker.unblock():
        # Server subprocesses killed on purpose may leave backends that PostgreSQL has not
        # reaped yet; end them so the test database can be dropped.
        with connections["default"].cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        for conn in connections.all():
            conn.close_pool()


@pytest.fixture(autouse=True)
def no_limits_carried_over():
    """Rate counters and failure locks (core.throttle) start empty in each test: they are keyed
    by usernames and client addresses that every test shares (alice, 127.0.0.1)."""
    from agntchat.core import presence

    redis = presence.client()
    keys = [
        key
        for pattern in ("rate", "throttle", "login")  # login: addresses known for a username
        for key in redis.scan_iter(f"{settings.REDIS_PREFIX}:{pattern}:*", count=1000)
    ]
    if keys:
        redis.delete(*keys)


@pytest.fixture(autouse=True)
def fresh_channel_layer():
    """Each test gets its own channel-layer instance (same real Redis): the layer keeps asyncio
    locks bound to the event loop that first used them, and every async test has its own loop."""
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


def directives_for(agent, message) -> dict:
    """The directives a claim would hand AGENT for MESSAGE (its history read as a claim reads it)."""
    from conversations.models import Message
    from work import directives

    message.history_window = (
        Message.objects.filter(pk=message.pk)
        .values_list(directives.history_window("conversation_id"), flat=True)
        .get()
    )
    return directives.for_messages(agent, [message])[message.id]


class Clock:
    """The server's time as a test moves it: ``timezone.now()`` is the real time plus whatever
    the test has advanced it by, so a lease or an expiry runs out when the test says, not after
    a sleep."""

    def __init__(self):
        self.offset = timedelta(0)

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


@pytest.fixture
def clock(monkeypatch):
    """The clock of this process's server code (the ASGI app, actions, claims); server
    subprocesses keep their own."""
    moved, real_now = Clock(), timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + moved.offset)
    return moved


@pytest.fixture(scope="module")
def server(django_db_setup):
    """A real daphne process serving agntchat on the test database, one per module: starting
    one costs seconds, and it keeps nothing of a test's data that the next test could see
    (tests that stop or kill their server start a Daphne of their own)."""
    from tests.socket_helpers import Daphne

    daphne = Daphne()
    yield daphne
    daphne.stop()


@pytest.fixture
def staff(alice):
    """A test client signed in as Alice, made staff."""
    from django.test import Client

    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    client = Client()
    client.force_login(alice)
    return client
