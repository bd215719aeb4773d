"""Every per-address limit counts an IPv6 client by its /64 network: the client is given the whole
of it and could take a new address for each guess. An IPv4 address given as IPv6
(::ffff:a.b.c.d) counts as the IPv4 address. Addresses a person signed in from count alike."""

import pytest
from django.test import Client, RequestFactory

from agents import actions as agent_actions
from workspaces.login import client_address
from workspaces.models import User

pytestmark = pytest.mark.django_db

RIGHT = "pw-alice-123456"  # the cast's password for alice (tests/conftest.py)


def token(username, password, address):
    return Client().post(
        "/api/v1/auth/token/",
        {"username": username, "password": password},
        content_type="application/json",
        REMOTE_ADDR=address,
    )


@pytest.mark.parametrize(
    "remote, counted_as",
    [
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("2001:db8:1:2::99", "2001:db8:1:2::/64"),
        ("fe80::1%eth0", "fe80::/64"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("192.0.2.7", "192.0.2.7"),
        ("", "unknown"),
    ],
)
def test_it_counts_an_address_as(remote, counted_as):
    assert client_address(RequestFactory().get("/", REMOTE_ADDR=remote)) == counted_as


def test_failures_from_one_64_lock_the_username_from_all_of_it(alice):
    for n in range(1, 6):
        assert token("alice", "guess", f"2001:db8:0:1::{n}").status_code == 401
    assert token("alice", RIGHT, "2001:db8:0:1::ffff").status_code == 429
    # The next /64 is someone else's.
    assert token("alice", RIGHT, "2001:db8:0:2::1").status_code == 201


def test_a_64_trying_many_usernames_is_locked(alice, settings):
    settings.LOGIN_FAILURES_PER_ADDRESS = 3
    for n, name in enumerate(("ann", "ben", "cat"), start=1):
        assert token(name, "guess", f"2001:db8:0:3::{n}").status_code == 401
    assert token("alice", RIGHT, "2001:db8:0:3::beef").status_code == 429


def test_an_ipv4_address_given_as_ipv6_is_the_same_address(alice):
    for n in range(5):
        address = "198.51.100.7" if n % 2 else "::ffff:198.51.100.7"
        assert token("alice", "guess", address).status_code == 401
    assert token("alice", RIGHT, "198.51.100.7").status_code == 429
    assert token("alice", RIGHT, "::ffff:198.51.100.7").status_code == 429


def test_the_64_a_person_signed_in_from_is_theirs_for_the_lockout(alice, settings):
    """Others' guesses from everywhere lock alice out of new places, not out of her /64, whatever
    address in it she comes from next."""
    settings.LOGIN_FAILURES_PER_USERNAME_ANYWHERE = 3
    assert token("alice", RIGHT, "2001:db8:0:5::1").status_code == 201
    for n in range(3):
        assert token("alice", "guess", f"203.0.113.{n}").status_code == 401
    assert token("alice", RIGHT, "203.0.113.99").status_code == 429
    assert token("alice", RIGHT, "2001:db8:0:5::beef").status_code == 201


def test_sign_ups_from_one_64_share_the_limit(settings):
    settings.SIGNUPS_PER_HOUR_PER_ADDRESS = 1
    form = {"password1": "pw-signup-881234", "password2": "pw-signup-881234"}
    first = Client().post("/signup/", {"username": "one", **form}, REMOTE_ADDR="2001:db8:0:7::1")
    assert first.status_code == 302
    refused = Client().post("/signup/", {"username": "two", **form}, REMOTE_ADDR="2001:db8:0:7::2")
    assert refused.status_code == 200 and b"Too many sign-ups from your address" in refused.content
    assert not User.objects.filter(username="two").exists()


def test_api_tokens_per_address_count_the_64(alice, bob, settings):
    settings.TOKENS_PER_MINUTE_PER_ADDRESS = 1
    assert token("alice", RIGHT, "2001:db8:0:9::1").status_code == 201
    refused = token("bob", "pw-bob-123456", "2001:db8:0:9::2")
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"


def test_bad_agent_keys_lock_the_64(nova, settings):
    settings.AGENT_KEY_FAILURES_PER_ADDRESS = 3
    _, key = agent_actions.create_agent_key(nova)

    def exchange(secret, address):
        return Client().post(
            "/api/v1/agent/session/", HTTP_AUTHORIZATION=f"Bearer {secret}", REMOTE_ADDR=address
        )

    for n in range(1, 4):
        assert exchange("agk_wrong", f"2001:db8:0:b::{n}").status_code == 401
    assert exchange(key, "2001:db8:0:b::beef").status_code == 429
    assert exchange(key, "2001:db8:0:c::1").status_code == 200
