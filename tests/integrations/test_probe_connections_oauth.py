"""Probes of OAuth connections as a demanding user meets them: the server's own app settings
refused while renewing (not the person's grant), a token endpoint answering something that is
not a token, and disconnecting an account whose access token has already expired."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from agntchat.core import crypto
from integrations import connections
from integrations.models import Connection
from tests.integrations.oauth_standin import AuthServer, serving

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def standin():
    with serving(AuthServer()) as server:
        yield server


def held(user, server, provider="google", expires_in=5) -> Connection:
    """A connection whose grant is good at the provider, its access token about to expire."""
    issued = server.issue()
    return Connection.objects.create(
        provider=provider, user=user, account="alice@example.com",
        access_ciphertext=crypto.encrypt(issued["access"]),
        refresh_ciphertext=crypto.encrypt(issued["refresh"]),
        expires_at=timezone.now() + timedelta(seconds=expires_in),
    )  # fmt: skip


def test_a_refused_client_secret_is_the_operators_to_fix_not_every_persons(alice, standin):
    """The operator's client secret is wrong (rotated at Google, mistyped): renewing is refused
    with invalid_client. The person's grant is fine, so the connection is not turned to
    'reconnect' (every person would have to sign in again, and it would not help); the call says
    the server's settings were refused."""
    connection = held(alice, standin)
    wrong = standin.provider_settings() | {"client_secret": "rotated-away"}
    with override_settings(OAUTH_PROVIDERS={"google": wrong}):
        with pytest.raises(connections.ProviderNotConfigured) as refused:
            connections.access_token(connection)
    assert "invalid_client" in refused.value.message and "operator" in refused.value.message
    connection.refresh_from_db()
    assert connection.status == Connection.Status.ACTIVE and connection.problem == ""
    # Fixed by the operator: the same connection renews.
    assert connections.access_token(connection) in standin.access


@pytest.mark.parametrize(
    "answer",
    [
        (200, b"<html>Sign in to the Wi-Fi</html>"),  # a captive proxy's page
        (200, b"access_token=x&scope=repo"),  # GitHub's form-encoded default
        (200, b'{"token_type": "Bearer"}'),  # JSON, but no token in it
    ],
)
def test_a_token_endpoint_answering_no_token_is_said_clearly(alice, standin, answer):
    connection = held(alice, standin)
    standin.outage = answer
    with pytest.raises(connections.ProviderUnreachable) as failed:
        connections.access_token(connection)
    assert "renew access" in failed.value.message
    connection.refresh_from_db()
    assert connection.status == Connection.Status.ACTIVE


def test_disconnecting_revokes_the_grant_not_only_an_expired_access_token(alice, standin):
    """Google's revoke endpoint takes the refresh token to end the whole grant; an access token
    that expired an hour ago revokes nothing there."""
    connection = held(alice, standin, expires_in=-3600)
    refresh = crypto.decrypt(connection.refresh_ciphertext)
    connections.disconnect(alice, connection)
    assert standin.revoked == [refresh]
    assert not Connection.objects.exists()


def test_a_call_refused_with_a_token_replaced_meanwhile_does_not_undo_a_reconnect(alice, standin):
    """A GitHub OAuth App's token (no refresh token) is revoked; while a call holding it is under
    way, Alice reconnects. The call's 401 is for the old token: it tries the new one, and does
    not turn her fresh connection back to 'reconnect'."""
    old, new = standin.issue()["access"], standin.issue()["access"]
    connection = Connection.objects.create(
        provider="github", user=alice, account="alice", access_ciphertext=crypto.encrypt(old)
    )
    standin.access.discard(old)  # revoked at GitHub
    Connection.objects.filter(pk=connection.pk).update(access_ciphertext=crypto.encrypt(new))
    answer = connections.api_request(connection, "GET", f"{standin.url}/api/ping")
    assert answer.status_code == 200 and answer.json()["token"] == new
    stored = Connection.objects.get(pk=connection.pk)
    assert stored.status == Connection.Status.ACTIVE and stored.problem == ""
