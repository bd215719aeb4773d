"""Bearer authentication for REST: personal tokens (apt_) and agent session tokens (ags_).
Here, above workspaces and agents, because it resolves both kinds of principal."""

from datetime import timedelta

from django.db.models import F
from django.utils import timezone
from rest_framework import authentication, exceptions

from agents.access import agent_for_session_token
from agntchat.core import crypto
from agntchat.core.compiled import compiled_first
from workspaces.models import ApiToken, User


def bearer_secret(header_value: str) -> str | None:
    scheme, _, secret = (header_value or "").partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        return None
    return secret.strip()


def person_for_token(secret: str):
    """The active person owning a live ``apt_`` token, or None. Every API request asks, so the
    SQL is compiled once (core.compiled)."""

    def with_token(token_hash):
        return compiled_first(
            ("person_for_token",),
            lambda token_hash: User.objects.filter(
                api_tokens__token_hash=token_hash,
                api_tokens__revoked_at__isnull=True,
                is_active=True,
            ).annotate(token_id=F("api_tokens__id"), token_used_at=F("api_tokens__last_used_at")),
            token_hash=token_hash,
        )

    user = crypto.find_by_secret(with_token, ApiToken.objects, "token_hash", secret)
    if user is None:
        return None
    now = timezone.now()
    if user.token_used_at is None or now - user.token_used_at > timedelta(minutes=1):
        # At most once a minute: a busy client's requests must not queue on this one row.
        ApiToken.objects.filter(pk=user.token_id).update(last_used_at=now)
    return user


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer apt_…`` acts as the person; ``Bearer ags_…`` as the agent."""

    def authenticate(self, request):
        raw = authentication.get_authorization_header(request).decode("latin-1")
        secret = bearer_secret(raw)
        if secret is None:
            if raw:
                raise exceptions.AuthenticationFailed("Use 'Authorization: Bearer <token>'.")
            return None
        kind = secret.split("_", 1)[0]
        if kind in ("agk", "aht"):
            what = "Agent keys are" if kind == "agk" else "Host tokens are"
            raise exceptions.AuthenticationFailed(
                f"{what} accepted only by POST /api/v1/agent/session/; exchange it for a session token."
            )
        principal = (
            person_for_token(secret)
            if kind == "apt"
            else agent_for_session_token(secret)
            if kind == "ags"
            else None
        )
        if principal is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        return principal, secret

    def authenticate_header(self, request):
        return 'Bearer realm="agntchat"'
