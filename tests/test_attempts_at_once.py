"""Wrong secrets sent at the same instant get no more checks than one after another: each
attempt is counted in Redis before it is checked, atomically with the check of the count
(throttle.begin_attempt), so twenty at once cannot all read "four failures so far" before any
of them is counted. Passwords (workspaces/login.py) and agent keys (agents/exchange.py)."""

from collections import Counter

import pytest
from django.test import RequestFactory

from agents.exceptions import KeyExchangeThrottled
from agents.exchange import exchange_secret
from agntchat.core.exceptions import AppError
from tests.concurrency import run_together
from workspaces.login import authenticate_person

# Committed: the threads read alice through connections of their own.
pytestmark = pytest.mark.django_db(transaction=True)

AT_ONCE = 20


def at_once(attempt, arguments: list) -> Counter:
    """ATTEMPT(argument) for each of ARGUMENTS, each on its own thread, all released together:
    how many were "checked" (it returned: the secret was looked at, and was wrong) and how many
    "throttled" (refused before)."""

    def outcome(result):
        if isinstance(result, AppError):
            return "throttled" if result.status == 429 else result.code
        return "checked" if result is None else "accepted"

    results = run_together(attempt, [(argument,) for argument in arguments], catching=AppError)
    return Counter(outcome(result) for result in results)


def sign_in_from(address: str):
    def attempt(username):
        request = RequestFactory().post("/login/", REMOTE_ADDR=address)
        return authenticate_person(request, username, "guess")

    return attempt


def test_failures_at_once_get_no_more_checks_than_the_username_limit(alice, settings):
    settings.LOGIN_FAILURES_PER_USERNAME = 5
    outcomes = at_once(sign_in_from("203.0.113.5"), ["alice"] * AT_ONCE)
    assert outcomes == {"checked": 5, "throttled": AT_ONCE - 5}


def test_failures_at_once_get_no_more_checks_than_the_address_limit(alice, settings):
    settings.LOGIN_FAILURES_PER_ADDRESS = 5
    usernames = [f"someone{n}" for n in range(AT_ONCE)]
    outcomes = at_once(sign_in_from("203.0.113.6"), usernames)
    assert outcomes == {"checked": 5, "throttled": AT_ONCE - 5}


def test_bad_agent_keys_at_once_get_no_more_lookups_than_the_address_limit(settings):
    settings.AGENT_KEY_FAILURES_PER_ADDRESS = 5
    settings.AGENT_SESSIONS_PER_MINUTE_PER_ADDRESS = 1000
    keys = [f"agk_wrong{n}" for n in range(AT_ONCE)]
    outcomes = at_once(lambda key: exchange_secret(key, "203.0.113.7"), keys)
    assert outcomes == {"checked": 5, "throttled": AT_ONCE - 5}
    assert KeyExchangeThrottled.status == 429
