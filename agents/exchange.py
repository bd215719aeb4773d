"""The one door for agent keys (agk_) and host placement tokens (aht_): POST
/api/v1/agent/session/ exchanges either for a session token. Throttled in Redis like password
sign-in (workspaces/login.py): a client address that presents too many bad secrets is locked
for a while, and an address (and, in the actions, an agent) opens so many sessions a minute."""

from django.conf import settings

from agents import actions, hosting
from agents.exceptions import KeyExchangeThrottled
from agntchat.core import throttle
from agntchat.core.exceptions import RateLimited


def _failures() -> throttle.Rule:
    return throttle.failure_rule("agent_key:address", settings.AGENT_KEY_FAILURES_PER_ADDRESS)


def exchange_secret(secret: str, address: str):
    """(session, token) for a live key or placement token, or None (a failure, counted). While
    ADDRESS is locked, raises KeyExchangeThrottled without looking the secret up; over the
    address's rate, RateLimited."""
    by_address = [(_failures(), address)]
    # Counted before the secret is looked up, so secrets sent together get no more tries.
    wait = throttle.begin_attempt(by_address)
    if wait:
        raise KeyExchangeThrottled(wait)
    wait = throttle.hit(
        throttle.Rate("sessions:address", settings.AGENT_SESSIONS_PER_MINUTE_PER_ADDRESS), address
    )
    if wait:
        throttle.end_attempt(by_address, failed=False)
        raise RateLimited(wait, "session requests")
    try:
        if secret.startswith("aht_"):
            opened = hosting.open_hosted_session(secret)
        elif secret.startswith("agk_"):
            opened = actions.open_agent_session(secret)
        else:
            opened = None
    except Exception:
        # A good secret refused for its agent's session rate (a bridge restarting in a loop), or
        # an error, is no bad secret: left counted, it would lock out every agent and host
        # behind the address.
        throttle.end_attempt(by_address, failed=False)
        raise
    throttle.end_attempt(by_address, failed=opened is None)
    return opened
