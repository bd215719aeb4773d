"""Password sign-in, the one place a password is checked: the login page, the admin's login page
and POST /api/v1/auth/token/. Throttled in Redis per username and per client address."""

from django.conf import settings
from django.contrib.auth import authenticate

from agntchat.core import throttle
from workspaces.exceptions import LoginThrottled


def _rule(name: str, limit: int) -> throttle.Rule:
    return throttle.Rule(
        f"login:{name}",
        limit=limit,
        window=settings.LOGIN_FAILURE_WINDOW,
        first_lock=settings.LOGIN_LOCK_SECONDS,
        longest_lock=settings.LOGIN_LOCK_MAX_SECONDS,
    )


def authenticate_person(request, username: str, password: str):
    """The active person USERNAME and PASSWORD identify, or None. While the username or the
    client's address is locked, raises LoginThrottled without checking the password."""
    by_username = (_rule("username", settings.LOGIN_FAILURES_PER_USERNAME), username.casefold())
    by_address = (
        _rule("address", settings.LOGIN_FAILURES_PER_ADDRESS),
        request.META.get("REMOTE_ADDR") or "unknown",
    )
    wait = throttle.locked_for([by_username, by_address])
    if wait:
        raise LoginThrottled(wait)
    user = authenticate(request, username=username, password=password)
    if user is None:
        throttle.record_failure([by_username, by_address])
    else:
        # The username starts over; the address does not, or one good account would clear an
        # address's failures on everyone else's.
        throttle.forget(*by_username)
    return user
