"""A browser's live socket lasts as long as the sign-in it was opened under: logging out closes
the sockets of that session (not the person's other sessions), deactivation closes them all,
and what sends no event (a session deleted or run out, a password changed) is caught by a
later ping's check. Closed with 4401, which the page shows as "Logged out"."""

import pytest
from asgiref.sync import sync_to_async
from django.contrib.sessions.models import Session
from django.test import Client

from conversations import consumers
from tests.socket_helpers import live_communicator, live_socket_for, next_frame

pytestmark = pytest.mark.django_db(transaction=True)


async def signed_in(user):
    client = Client()
    await sync_to_async(client.force_login)(user)
    return client, await live_socket_for(user, client=client)


async def closed_as_logged_out(comm) -> bool:
    error = await next_frame(comm)
    closed = await comm.receive_output(timeout=5)
    return (
        error["type"] == "error"
        and error["code"] == "unauthorized"
        and closed
        == {
            "type": "websocket.close",
            "code": 4401,
        }
    )


async def still_open(comm) -> bool:
    await comm.send_json_to({"type": "ping"})
    return (await next_frame(comm)) == {"type": "pong"}


async def test_logging_out_closes_that_sessions_sockets_only(alice, bob):
    (laptop, on_laptop), (_, on_phone) = await signed_in(alice), await signed_in(alice)
    _, bobs = await signed_in(bob)
    await sync_to_async(laptop.logout)()
    assert await closed_as_logged_out(on_laptop)
    assert await still_open(on_phone) and await still_open(bobs)
    for comm in (on_phone, bobs):
        await comm.disconnect()


async def test_a_person_made_inactive_loses_every_socket(alice, bob):
    (_, first), (_, second), (_, bobs) = (
        await signed_in(alice),
        await signed_in(alice),
        await signed_in(bob),
    )
    alice.is_active = False
    await sync_to_async(alice.save)(update_fields=["is_active"])
    assert await closed_as_logged_out(first) and await closed_as_logged_out(second)
    assert await still_open(bobs)
    await bobs.disconnect()


async def test_a_ping_finds_a_session_that_ended_without_a_word(alice, monkeypatch):
    _, comm = await signed_in(alice)
    monkeypatch.setattr(consumers, "SIGNED_IN_CHECK_SECONDS", 0)
    assert await still_open(comm)  # checked, and still signed in
    await sync_to_async(Session.objects.all().delete)()  # run out, or cleared by an admin
    await comm.send_json_to({"type": "ping"})
    assert await closed_as_logged_out(comm)


async def test_a_person_has_at_most_browser_max_connections_sockets(alice, bob, settings):
    """Each socket holds a node's memory and a share of every event: a person opening them
    without end is refused past the cap (4429, saying why), on every node alike (Redis), and
    a closed socket frees its place."""
    settings.BROWSER_MAX_CONNECTIONS = 2
    client = Client()
    await sync_to_async(client.force_login)(alice)
    first = await live_socket_for(alice, client=client)
    second = await live_socket_for(alice, client=client)
    refused = live_communicator(client)
    await refused.connect()
    error = await next_frame(refused)
    assert error["code"] == "too_many_connections" and "2 live connections" in error["message"]
    assert await refused.receive_output(timeout=5) == {"type": "websocket.close", "code": 4429}
    _, bobs = await signed_in(bob)  # another person's count is their own
    await first.disconnect()
    third = await live_socket_for(alice, client=client)
    assert await still_open(second) and await still_open(third)
    for comm in (second, third, bobs):
        await comm.disconnect()


async def test_a_socket_stays_counted_only_while_it_checks_in(alice, monkeypatch, settings):
    """A node that dies says nothing of its sockets: their places are freed when they stop
    checking in (the sign-in check of a ping refreshes them)."""
    from agntchat.core import presence

    settings.BROWSER_MAX_CONNECTIONS = 1
    monkeypatch.setattr(consumers, "SIGNED_IN_CHECK_SECONDS", 0)  # so counted for 60 s
    _, comm = await signed_in(alice)
    key = presence._key(alice.pk, "person")
    (expiry,) = await sync_to_async(presence.client().zrange)(key, 0, -1, withscores=True)
    assert await still_open(comm)  # its check-in pushes the expiry on
    (later,) = await sync_to_async(presence.client().zrange)(key, 0, -1, withscores=True)
    assert later[1] > expiry[1] and 50 < later[1] - __import__("time").time() <= 60
    await comm.disconnect()
    assert await sync_to_async(presence.client().zcard)(key) == 0
