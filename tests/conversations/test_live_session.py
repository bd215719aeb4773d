"""A browser's live socket lasts as long as the sign-in it was opened under: logging out closes
the sockets of that session (not the person's other sessions), deactivation closes them all,
and what sends no event (a session deleted or run out, a password changed) is caught by a
later ping's check. Closed with 4401, which the page shows as "Logged out"."""

import pytest
from asgiref.sync import sync_to_async
from django.contrib.sessions.models import Session
from django.test import Client

from conversations import consumers
from tests.socket_helpers import live_socket_for, next_frame

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
