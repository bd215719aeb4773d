"""The claim statement itself (core.claims): on two real database connections, across
workspaces, and as its leases run out at the times the tests pass."""

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from agntchat.core import claims
from conversations import actions
from conversations.models import Delivery, Task

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_claim_locks_only_the_rows_it_takes(alice, channel, nova):
    # Open work in two workspaces: the claim walks both, yet must lock no row beyond its limit,
    # or a sibling connection claiming at the same moment would skip work nobody takes.
    personal = alice.owned_workspaces.get(kind="personal")
    dm = actions.create_conversation(alice, personal, kind="direct", agent_ids=[nova.id])
    for i in range(3):
        actions.post_message(alice, channel, f"team {i}")
        actions.post_message(alice, dm, f"personal {i}")
    claimed, release = [], threading.Event()

    def hold_a_claim_open():
        # The claim runs inside a transaction kept open, so its row locks stay visible.
        try:
            with transaction.atomic():
                claimed.extend(claims.claim(Delivery, nova.id, "first", 2, timezone.now(), 60))
                release.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_a_claim_open)
    holder.start()
    try:
        for _ in range(100):
            if claimed:
                break
            threading.Event().wait(0.05)
        assert len(claimed) == 2
        with transaction.atomic():
            free = Delivery.objects.select_for_update(skip_locked=True).filter(
                agent=nova, acked_at__isnull=True
            )
            assert sorted(str(d.id) for d in free) == sorted(
                str(i)
                for i in Delivery.objects.filter(agent=nova).values_list("id", flat=True)
                if i not in claimed
            )
    finally:
        release.set()
        holder.join()


def test_claims_take_the_least_recently_served_workspace_first_then_oldest(alice, channel, nova):
    personal = alice.owned_workspaces.get(kind="personal")
    dm = actions.create_conversation(alice, personal, kind="direct", agent_ids=[nova.id])
    for i in range(3):
        actions.post_message(alice, channel, f"team {i}")
    actions.post_message(alice, dm, "personal 0")
    bodies = []
    for _ in range(4):
        (item,) = claims.claim(Delivery, nova.id, "c", 1, timezone.now(), 60)
        bodies.append(Delivery.objects.get(pk=item).message.body)
        claims.ack(Delivery, item, "c", timezone.now())
    # Whichever workspace goes first, the other is served next; each in its own order.
    assert set(bodies[:2]) & {"personal 0"}, bodies
    assert [b for b in bodies if b.startswith("team")] == ["team 0", "team 1", "team 2"]


def test_a_lease_runs_out_at_its_expiry_and_the_item_is_offered_again(alice, channel, nova):
    actions.post_message(alice, channel, "slow one")
    start = timezone.now()
    (item,) = claims.claim(Delivery, nova.id, "holder", 1, start, 60)
    # Up to its expiry the lease holds: nobody else gets the item.
    assert claims.claim(Delivery, nova.id, "other", 1, start + timedelta(seconds=60), 60) == []
    later = start + timedelta(seconds=61)
    assert claims.claim(Delivery, nova.id, "other", 1, later, 60) == [item]
    assert Delivery.objects.get(pk=item).attempts == 2
    with pytest.raises(claims.NotHeld):
        claims.ack(Delivery, item, "holder", later)  # too late: no longer the holder's
    assert claims.ack(Delivery, item, "other", later) == {"id": item}


def test_extending_keeps_an_item_past_its_first_lease(alice, channel, nova):
    actions.post_message(alice, channel, "long turn")
    start = timezone.now()
    (item,) = claims.claim(Delivery, nova.id, "holder", 1, start, 60)
    for seconds in (50, 100, 150):
        claims.extend(Delivery, item, "holder", start + timedelta(seconds=seconds), 60)
    assert claims.claim(Delivery, nova.id, "other", 1, start + timedelta(seconds=209), 60) == []
    with pytest.raises(claims.NotHeld):
        claims.extend(Delivery, item, "other", start + timedelta(seconds=209), 60)
    # The last extension's lease runs out like any other.
    later = start + timedelta(seconds=211)
    assert claims.claim(Delivery, nova.id, "other", 1, later, 60) == [item]


def test_waiting_says_where_a_claim_would_take_something_as_the_claim_itself_decides(
    alice, channel, nova
):
    kinds = [Delivery, Task]
    start = timezone.now()
    assert claims.waiting(kinds, nova.id, start) == [False, False]
    actions.post_message(alice, channel, "one")
    assert claims.waiting(kinds, nova.id, start) == [True, False]
    (item,) = claims.claim(Delivery, nova.id, "holder", 1, start, 60)
    # Held under a live lease: nothing for anyone else, so nothing waits.
    assert claims.waiting(kinds, nova.id, start + timedelta(seconds=60)) == [False, False]
    # Once the lease ran out the item waits again, as the claim would take it.
    later = start + timedelta(seconds=61)
    assert claims.waiting(kinds, nova.id, later) == [True, False]
    assert claims.claim(Delivery, nova.id, "other", 1, later, 60) == [item]
    claims.ack(Delivery, item, "other", later)
    assert claims.waiting(kinds, nova.id, later + timedelta(days=1)) == [False, False]
