"""A cron schedule keeps to the routines' minimum interval (probe F7): five fields only (a sixth
would be seconds), no two runs closer than five minutes, no step past its field; and after a long
downtime the catch-up run counts the missed slots of a cron with bounded work."""

from datetime import UTC, datetime, timedelta

import pytest
from cronsim import CronSim

from routines import actions, schedules
from routines.models import Routine, RoutineRun

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 3, 8, 2, tzinfo=UTC)


def on_cron(alice, nova, workspace, cron, timezone_name="UTC", now=T0):
    return actions.create_routine(
        alice, nova, workspace, name="Sweep", instructions="Sweep the inbox.", cron=cron,
        timezone_name=timezone_name, now=now,
    )  # fmt: skip


@pytest.mark.parametrize(
    "cron, says",
    [
        ("* * * * * *", "(6 fields); five fields (minute hour day month weekday)"),
        ("0 9 * * 1-5 2027", "(6 fields)"),
        ("@hourly", "(1 field)"),
        ("* * * * *", "has runs 1 minute apart; a routine runs at most every 5 minutes"),
        ("*/2 9 * * *", "has runs 2 minutes apart"),
        # :56 and the next hour's :00 are four minutes apart.
        ("*/7 * * * *", "has runs 4 minutes apart"),
        ("0,58 9,10 * * *", "has runs 2 minutes apart"),
        # 23:58 and midnight: the next day may be one of its days too.
        ("0,58 0,23 * * *", "has runs 2 minutes apart"),
        ("*/99999999999 * * * *", "has a step longer than its minute field (60 values)"),
        ("0 */25 * * *", "has a step longer than its hour field"),
    ],
)
def test_a_cron_closer_than_the_minimum_or_with_seconds_is_refused_saying_why(
    alice, team_a, nova, cron, says
):
    with pytest.raises(schedules.ScheduleInvalid) as refused:
        on_cron(alice, nova, team_a, cron)
    assert says in refused.value.message
    assert not Routine.objects.exists()


@pytest.mark.parametrize(
    "cron", ["*/5 * * * *", "0,55 * * * *", "0,58 9,11 * * *", "58 23 * * *", "*/60 * * * *"]
)
def test_a_cron_at_least_five_minutes_between_runs_is_taken(alice, team_a, nova, cron):
    assert on_cron(alice, nova, team_a, cron).cron == cron


def test_rest_answers_400_and_a_change_to_a_seconds_cron_changes_nothing(alice, team_a, nova, api):
    body = {"agent": str(nova.id), "workspace": str(team_a.id), "instructions": "x"}
    refused = api(alice).post("/api/v1/routines/", {**body, "cron": "* * * * * *"}, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "schedule_invalid"
    assert refused.json()["error"]["fields"] == {"cron": "Not a cron expression."}
    assert not Routine.objects.exists()

    routine = on_cron(alice, nova, team_a, "0 9 * * *")
    url = f"/api/v1/routines/{routine.id}/"
    changed = api(alice).patch(url, {"cron": "* * * * *"}, format="json")
    assert changed.status_code == 400
    assert changed.json()["error"]["fields"] == {"cron": "Runs closer than 5 minutes apart."}
    routine.refresh_from_db()
    assert routine.cron == "0 9 * * *"


def walked_latest(cron, timezone_name, first, now):
    """The latest slot at or before NOW, found the slow way: every slot from FIRST on."""
    latest = first
    for slot in CronSim(cron, first.astimezone(schedules.zone(timezone_name))):
        if slot > now:
            return latest
        latest = slot


@pytest.mark.parametrize(
    "cron, timezone_name",
    [("*/5 * * * *", "UTC"), ("0 9 * * 1-5", "America/New_York"), ("30 2 * * *", "Europe/Lisbon")],
)
def test_after_a_long_downtime_a_cron_counts_a_thousand_missed_slots_at_most(
    alice, team_a, nova, cron, timezone_name
):
    """Years down: the run is at the latest slot, as walking every slot would find it, and the
    count stops at MAX_SKIPPED_COUNTED (that many or more) instead of walking them all."""
    long_ago = T0 - timedelta(days=366 * 5)
    routine = on_cron(alice, nova, team_a, cron, timezone_name, now=long_ago)
    first = routine.next_run_at
    assert actions.run_due_routines(now=T0) == 1
    run = RoutineRun.objects.get()
    assert run.slot == walked_latest(cron, timezone_name, first, T0)
    assert run.skipped_count == schedules.MAX_SKIPPED_COUNTED == 1000
    assert len(run.skipped_slots) == schedules.MAX_SKIPPED_LISTED
    assert datetime.fromisoformat(run.skipped_slots[0]) == first
    routine.refresh_from_db()
    assert routine.next_run_at > T0


def test_a_short_downtime_is_still_counted_slot_by_slot(alice, team_a, nova):
    routine = on_cron(alice, nova, team_a, "*/5 * * * *")
    assert routine.next_run_at == datetime(2026, 12, 3, 8, 5, tzinfo=UTC)
    assert actions.run_due_routines(now=T0 + timedelta(hours=2)) == 1
    run = RoutineRun.objects.get()
    assert (run.slot, run.skipped_count) == (datetime(2026, 12, 3, 10, 0, tzinfo=UTC), 23)


@pytest.mark.parametrize(
    "cron, start, slots",
    [
        # Autumn: 01:30 comes twice in New York (EDT, then EST); the routine runs once that day.
        (
            "30 1 * * *",
            datetime(2027, 11, 6, 12, tzinfo=UTC),
            [datetime(2027, 11, 7, 5, 30, tzinfo=UTC), datetime(2027, 11, 8, 6, 30, tzinfo=UTC)],
        ),
        # Spring: 02:30 does not exist that day; the routine runs when the clock jumps (03:00).
        (
            "30 2 * * *",
            datetime(2027, 3, 13, 12, tzinfo=UTC),
            [datetime(2027, 3, 14, 7, 0, tzinfo=UTC), datetime(2027, 3, 15, 6, 30, tzinfo=UTC)],
        ),
    ],
)
def test_a_cron_runs_once_a_day_across_daylight_saving_changes(alice, nova, cron, start, slots):
    routine = on_cron(alice, nova, alice.owned_workspaces.first(), cron, "America/New_York", start)
    assert routine.next_run_at == slots[0]
    assert schedules.next_slot(routine, slots[0]) == slots[1]
