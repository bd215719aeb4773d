"""Password sign-in, the one place a password is checked: the login page, the admin's login page
and POST /api/v1/auth/token/. Throttled in Redis per username and client address together, per
address, and per username from unknown addresses."""

import ipaddress

from django.conf import settings
from django.contrib.auth import authenticate

from agntchat.core import throttle
from agntchat.core.events import publish, publish_many
from workspaces.exceptions import LoginThrottled
from workspaces.models import ApiToken


def _rule(name: str, limit: int) -> throttle.Rule:
    return throttle.failure_rule(f"login:{name}", limit)


def authenticate_person(request, username: str, password: str):
    """The active person USERNAME and PASSWORD identify, or None. While locked, raises
    LoginThrottled without checking the password.

    Failures lock the username from the address they came from (LOGIN_FAILURES_PER_USERNAME),
    the address for every username (…_PER_ADDRESS), and the username from everywhere it has
    not signed in before (…_PER_USERNAME_ANYWHERE, many guesses from many addresses). An
    address the person signed in from recently is held back only by its own failures: no one
    can lock a person out of their usual places with failures of their own."""
    name, address = username.casefold(), client_address(request)
    pair = (_rule("username", settings.LOGIN_FAILURES_PER_USERNAME), f"{name} {address}")
    others = [
        (_rule("address", settings.LOGIN_FAILURES_PER_ADDRESS), address),
        (_rule("anywhere", settings.LOGIN_FAILURES_PER_USERNAME_ANYWHERE), name),
    ]
    # From a known address only the pair holds the attempt back; it still counts for the others.
    held_back, also_counted = (
        ([pair], others) if _is_known(name, address) else ([pair, *others], [])
    )
    # Counted before the password is checked, so attempts sent together cannot all get through.
    wait = throttle.begin_attempt(held_back, also_counted)
    if wait:
        raise LoginThrottled(wait)
    user = authenticate(request, username=username, password=password)
    throttle.end_attempt([pair, *others], failed=user is None)
    if user is not None:
        # The pair starts over; the address does not, or one good account would clear an
        # address's failures on everyone else's.
        throttle.forget(*pair)
        remember_address(name, address)
    return user


def _known_key(name: str) -> str:
    return f"{settings.REDIS_PREFIX}:login:known:{name}"


def _is_known(name: str, address: str) -> bool:
    return bool(throttle.client().sismember(_known_key(name), address))


def remember_address(username: str, address: str) -> None:
    """ADDRESS is one USERNAME signed in from (or signed up from), for LOGIN_KNOWN_ADDRESS_DAYS
    from now."""
    name = username.casefold()
    pipe = throttle.client().pipeline(transaction=False)
    pipe.sadd(_known_key(name), address)
    pipe.expire(_known_key(name), settings.LOGIN_KNOWN_ADDRESS_DAYS * 86400)
    pipe.execute()


def client_address(request) -> str:
    """The client's address as every per-address limit counts it (sign-in failures, known
    addresses, sign-ups, tokens, agent sessions). An IPv6 client is given a whole /64 and can
    move through it at will, so its /64 network counts as one address; an IPv4 address counts
    alone, also when it comes as IPv6 (::ffff:a.b.c.d)."""
    remote = request.META.get("REMOTE_ADDR") or ""
    try:
        ip = ipaddress.ip_address(remote.split("%", 1)[0])  # without an IPv6 zone (fe80::1%eth0)
    except ValueError:
        return remote or "unknown"
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    if ip.version == 6:
        return str(ipaddress.ip_network((ip, 64), strict=False))
    return str(ip)


def count_token_issued(request, user) -> None:
    """Once the password is right: a person and a client address get so many API tokens a
    minute (TOKENS_PER_MINUTE…); RateLimited beyond, and no token is issued. (Failures are
    the failure throttle's.)"""
    checks = (
        (
            throttle.Rate("tokens:person", settings.TOKENS_PER_MINUTE, burst=settings.TOKENS_BURST),
            str(user.pk),
        ),
        (
            throttle.Rate("tokens:address", settings.TOKENS_PER_MINUTE_PER_ADDRESS),
            client_address(request),
        ),
    )
    for rate, key in checks:
        throttle.limit(rate, key, "token requests")


# ---- a browser's live socket ends with the sign-in it was opened under ----
# (conversations.consumers.LiveSocket.session_ended closes it: 4401, "Logged out" in the page.)


def end_live_sockets_of_session(sender, request, user, **kwargs) -> None:
    """Logging out (Django's user_logged_out, before the session is flushed) closes the live
    sockets opened with that session, on every node."""
    if user is not None and getattr(request, "session", None) is not None:
        publish(
            f"user.{user.pk}", {"type": "session.ended", "session": request.session.session_key}
        )


def api_token_topic(token_id) -> str:
    """Where the sockets opened with an API token (a laptop's supervisor) hear it end."""
    return f"api_token.{token_id}"


def end_live_sockets(user) -> None:
    """Close every browser socket of USER, on every node (a password changed, an account made
    inactive)."""
    publish(f"user.{user.pk}", {"type": "session.ended", "session": None})


def end_live_sockets_of_inactive(sender, instance, **kwargs) -> None:
    """A person made inactive can sign in nowhere: all their live sockets close."""
    if not instance.is_active:
        end_live_sockets(instance)
        # And the sockets opened with their API tokens (a laptop's supervisor).
        tokens = ApiToken.objects.filter(user=instance, revoked_at__isnull=True)
        topics = [api_token_topic(t) for t in tokens.values_list("pk", flat=True)]
        if topics:
            publish_many(topics, {"type": "session.ended", "reason": "deactivated"})
