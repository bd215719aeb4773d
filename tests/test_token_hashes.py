"""Stored bearer secrets are hashed with a key derived from SECRET_KEY. Hashes made the old way
(one constant key for every installation) still work once and are upgraded on that use."""

import hashlib
import hmac
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import AgentKey, AgentSession
from agntchat.core import crypto
from workspaces.actions import accept_invitation, issue_api_token
from workspaces.models import ApiToken, Invitation

pytestmark = pytest.mark.django_db


def old_hash(secret: str) -> str:
    """How every hash was made before: keyed with a constant that every installation shared."""
    return hmac.new(b"agntchat-secret", secret.encode(), hashlib.sha256).hexdigest()


def me(client, secret):
    return client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {secret}")


def test_an_api_token_hashed_the_old_way_still_works_and_is_upgraded(alice, client):
    secret = crypto.new_secret("apt")
    token = ApiToken.objects.create(
        user=alice, prefix=crypto.lookup_prefix(secret), token_hash=old_hash(secret)
    )
    assert me(client, secret).json()["username"] == "alice"
    token.refresh_from_db()
    assert token.token_hash == crypto.hash_secret(secret) != old_hash(secret)
    assert me(client, secret).status_code == 200
    # A wrong token upgrades nothing and gets nowhere.
    assert me(client, crypto.new_secret("apt")).status_code == 401
    assert list(ApiToken.objects.values_list("token_hash", flat=True)) == [token.token_hash]


def test_agent_keys_sessions_and_invitations_hashed_the_old_way_are_upgraded(
    alice, charlie, team_a, nova, client
):
    key_secret = crypto.new_secret("agk")
    key = AgentKey.objects.create(
        agent=nova, prefix=crypto.lookup_prefix(key_secret), key_hash=old_hash(key_secret)
    )
    opened = client.post("/api/v1/agent/session/", HTTP_AUTHORIZATION=f"Bearer {key_secret}")
    assert opened.status_code == 200 and opened.json()["agentId"] == str(nova.id)
    key.refresh_from_db()
    assert key.key_hash == crypto.hash_secret(key_secret) != old_hash(key_secret)

    session_secret = crypto.new_secret("ags")
    session = AgentSession.objects.create(
        agent=nova,
        key=key,
        prefix=crypto.lookup_prefix(session_secret),
        token_hash=old_hash(session_secret),
        expires_at=timezone.now() + timedelta(minutes=10),
    )
    own = client.get("/api/v1/agent/me/", HTTP_AUTHORIZATION=f"Bearer {session_secret}")
    assert own.status_code == 200 and own.json()["id"] == str(nova.id)
    session.refresh_from_db()
    assert session.token_hash == crypto.hash_secret(session_secret) != old_hash(session_secret)

    invite_secret = crypto.new_secret("inv")
    invitation = Invitation.objects.create(
        workspace=team_a,
        created_by=alice,
        token_hash=old_hash(invite_secret),
        expires_at=timezone.now() + timedelta(days=1),
    )
    assert accept_invitation(charlie, invite_secret).workspace == team_a
    invitation.refresh_from_db()
    assert invitation.token_hash == crypto.hash_secret(invite_secret) != old_hash(invite_secret)


def test_a_new_tokens_hash_depends_on_the_secret_key(alice, client, settings):
    _, secret = issue_api_token(alice)
    assert me(client, secret).status_code == 200
    first_key, stored = settings.SECRET_KEY, crypto.hash_secret(secret)
    settings.SECRET_KEY = "another installation's secret key, long and random enough"
    assert crypto.hash_secret(secret) != stored
    assert me(client, secret).status_code == 401
    # Rotating with the old key kept as a fallback keeps the token, re-hashed with the new key.
    settings.SECRET_KEY_FALLBACKS = [first_key]
    assert me(client, secret).status_code == 200
    assert ApiToken.objects.get().token_hash == crypto.hash_secret(secret) != stored
    settings.SECRET_KEY_FALLBACKS = []
    assert me(client, secret).status_code == 200
