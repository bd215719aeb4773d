"""Password sign-in is throttled per username and client address, per address, and per username
from addresses it never signed in from, in the real Redis, the same way on the REST token
endpoint, the login page and the admin's login page. Nobody locks a person out of the places
they sign in from."""

import pytest
from django.conf import settings
from django.test import Client

from agntchat.core import presence
from workspaces.models import ApiToken

pytestmark = pytest.mark.django_db

RIGHT = "pw-alice-123456"  # the cast's password for alice (tests/conftest.py)


@pytest.fixture(autouse=True)
def no_earlier_failures():
    def forget_all():
        redis = presence.client()
        keys = list(redis.scan_iter(f"{settings.REDIS_PREFIX}:throttle:*"))
        keys += list(redis.scan_iter(f"{settings.REDIS_PREFIX}:login:known:*"))
        if keys:
            redis.delete(*keys)

    forget_all()
    yield
    forget_all()


def token(client, username, password, address="127.0.0.1"):
    return client.post(
        "/api/v1/auth/token/",
        {"username": username, "password": password},
        content_type="application/json",
        REMOTE_ADDR=address,
    )


def lock_key_ttls() -> list[int]:
    redis = presence.client()
    return sorted(redis.ttl(k) for k in redis.scan_iter(f"{settings.REDIS_PREFIX}:throttle:*:lock"))


def end_locks() -> None:
    """What the passing of a lock's time does: its key expires (its history stays)."""
    redis = presence.client()
    redis.delete(*redis.scan_iter(f"{settings.REDIS_PREFIX}:throttle:*:lock"))


def test_five_failures_lock_the_username_even_against_the_right_password(alice, client):
    for _ in range(5):
        assert token(client, "alice", "guess").status_code == 401
    locked = token(client, "alice", RIGHT)
    assert locked.status_code == 429
    assert locked.json() == {
        "error": {
            "code": "login_throttled",
            "message": "Too many failed sign-in attempts. Try again in 1 minute.",
        }
    }
    assert 55 <= int(locked["Retry-After"]) <= 60
    assert ApiToken.objects.count() == 0
    # Another person is not held up by it, nor alice elsewhere: the failures were this address's.
    assert token(client, "bob", "guess").status_code == 401
    assert token(client, "alice", RIGHT, address="198.51.100.7").status_code == 201


def test_failures_from_many_addresses_lock_the_username_but_not_where_it_signs_in(
    alice, client, settings
):
    """Guesses spread over many addresses lock the username from any new address; from where
    alice signed in before, only her own failures there count (the address lock included)."""
    settings.LOGIN_FAILURES_PER_USERNAME_ANYWHERE = 4
    settings.LOGIN_FAILURES_PER_ADDRESS = 2
    home = "198.51.100.20"
    assert token(client, "alice", RIGHT, address=home).status_code == 201
    for n in range(4):
        assert token(client, "alice", "guess", address=f"203.0.113.{n}").status_code == 401
    assert token(client, "alice", RIGHT, address="203.0.113.99").status_code == 429
    for name in ("ann", "ben"):  # someone behind the same address as alice fails for others
        assert token(client, name, "guess", address=home).status_code == 401
    assert token(client, "bob", "pw-bob-123456", address=home).status_code == 429
    assert token(client, "alice", RIGHT, address=home).status_code == 201


def test_each_lock_within_a_day_lasts_twice_as_long(alice, client):
    for _ in range(5):
        token(client, "alice", "guess")
    assert lock_key_ttls() == [60]
    end_locks()
    for _ in range(5):
        assert token(client, "alice", "guess").status_code == 401
    locked = token(client, "alice", RIGHT)
    assert locked.status_code == 429 and 115 <= int(locked["Retry-After"]) <= 120
    assert locked.json()["error"]["message"] == (
        "Too many failed sign-in attempts. Try again in 2 minutes."
    )


def test_a_success_starts_the_usernames_count_over(alice, client):
    for _ in range(4):
        token(client, "alice", "guess")
    assert token(client, "alice", RIGHT).status_code == 201
    for _ in range(4):
        assert token(client, "alice", "guess").status_code == 401
    assert token(client, "alice", RIGHT).status_code == 201


def test_an_address_trying_many_usernames_is_locked(alice, client, settings):
    settings.LOGIN_FAILURES_PER_ADDRESS = 3
    for name in ("ann", "ben", "cat"):
        assert token(client, name, "guess", address="203.0.113.9").status_code == 401
    assert token(client, "alice", RIGHT, address="203.0.113.9").status_code == 429
    # From elsewhere, alice signs in at once: her username was never locked.
    assert token(client, "alice", RIGHT, address="198.51.100.1").status_code == 201


def test_the_login_page_says_why_and_does_not_log_in(alice):
    browser = Client()
    for _ in range(5):
        wrong = browser.post("/login/", {"username": "alice", "password": "guess"})
        assert "do not match" in wrong.content.decode()
    locked = browser.post("/login/", {"username": "alice", "password": RIGHT})
    assert locked.status_code == 200
    assert "Too many failed sign-in attempts. Try again in 1 minute." in locked.content.decode()
    assert "_auth_user_id" not in browser.session
    # Failures on the page count for the API too: one throttle.
    assert token(Client(), "alice", RIGHT).status_code == 429


def test_the_admin_login_shares_the_throttle(alice, client):
    alice.is_staff = alice.is_superuser = True
    alice.save()
    for _ in range(5):
        token(client, "alice", "guess")
    admin = Client()
    locked = admin.post("/admin/login/", {"username": "alice", "password": RIGHT})
    assert locked.status_code == 200
    assert "Too many failed sign-in attempts" in locked.content.decode()
    assert "_auth_user_id" not in admin.session
    end_locks()
    signed_in = admin.post("/admin/login/", {"username": "alice", "password": RIGHT})
    assert signed_in.status_code == 302 and admin.session["_auth_user_id"] == str(alice.id)


def test_sign_ins_that_succeed_count_against_no_limit(alice, bob, client, settings):
    """Each attempt is counted before its password is checked (tests/workspaces/
    test_login_concurrency.py); one whose password was right is uncounted again."""
    settings.LOGIN_FAILURES_PER_ADDRESS = 2
    settings.LOGIN_FAILURES_PER_USERNAME_ANYWHERE = 2
    for n in range(3):  # new addresses each time: the username-wide count holds them back
        assert token(client, "alice", RIGHT, address=f"198.51.100.{n}").status_code == 201
    shared = "203.0.113.40"
    assert token(client, "ann", "guess", address=shared).status_code == 401
    assert token(client, "bob", "pw-bob-123456", address=shared).status_code == 201
    assert token(client, "ben", "guess", address=shared).status_code == 401
    assert token(client, "cat", "guess", address=shared).status_code == 429
