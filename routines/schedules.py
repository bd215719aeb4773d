"""When a routine is due: every N minutes from when it was set up, or at the times of a cron
expression (``cronsim``) read in the routine's time zone; and the same said in words
(``cron-descriptor``)."""

import re
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cron_descriptor import get_description
from cronsim import CronSim, CronSimError

from agntchat.core.exceptions import AppError
from agntchat.core.text import counted

MIN_INTERVAL_MINUTES = 5  # the scheduler looks every 5 minutes
MAX_INTERVAL_MINUTES = 60 * 24 * 366
# Past this many missed slots the catch-up run stops listing them.
MAX_SKIPPED_LISTED = 100
# And past this many it stops counting them: a cron's slots are walked one by one.
MAX_SKIPPED_COUNTED = 1000
# A cron's five fields and how many values each has: a step longer than that is taken only once
# per cycle (*/90 in minutes runs hourly), not as it reads.
CRON_FIELDS = (("minute", 60), ("hour", 24), ("day of month", 31), ("month", 12), ("weekday", 7))


class ScheduleInvalid(AppError):
    code = "schedule_invalid"


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleInvalid(
            f"{name!r} is not a time zone; use an IANA name such as Europe/Lisbon.",
            fields={"timezone": "Unknown time zone."},
        ) from None


def check(interval_minutes: int | None, cron: str, timezone: str) -> None:
    """Exactly one of INTERVAL_MINUTES and CRON, each valid; TIMEZONE a real zone."""
    zone(timezone)
    if (interval_minutes is None) == (not cron):
        raise ScheduleInvalid("Give a routine either intervalMinutes or cron, not both.")
    if interval_minutes is not None and not (
        MIN_INTERVAL_MINUTES <= interval_minutes <= MAX_INTERVAL_MINUTES
    ):
        raise ScheduleInvalid(
            f"intervalMinutes must be between {MIN_INTERVAL_MINUTES} and {MAX_INTERVAL_MINUTES}.",
            fields={"interval_minutes": "Out of range."},
        )
    if cron:
        _check_cron(cron, timezone)


def _check_cron(cron: str, timezone: str) -> None:
    """CRON has five fields that cronsim reads, and no two of its slots are closer than
    MIN_INTERVAL_MINUTES (a sixth field would be seconds)."""
    fields = cron.split()
    try:
        if len(fields) != len(CRON_FIELDS):
            raise CronSimError(counted(len(fields), "field"))
        sim = CronSim(cron, datetime.now(zone(timezone)))
    except (CronSimError, ValueError) as exc:
        raise ScheduleInvalid(
            f"{cron!r} is not a cron expression ({exc}); five fields (minute hour day month "
            "weekday), such as '0 9 * * 1-5' for 9:00 on weekdays.",
            fields={"cron": "Not a cron expression."},
        ) from None
    for text, (name, size) in zip(fields, CRON_FIELDS, strict=True):
        steps = [int(step) for step in re.findall(r"/(\d+)", text)]
        if any(step > size for step in steps):
            raise ScheduleInvalid(
                f"{cron!r} has a step longer than its {name} field ({size} values), which cron "
                "takes only once per cycle, not as written; for longer periods use "
                "intervalMinutes.",
                fields={"cron": f"A step longer than the {name} field."},
            )
    gap = shortest_gap(sim.minutes, sim.hours)
    if gap < MIN_INTERVAL_MINUTES:
        raise ScheduleInvalid(
            f"{cron!r} has runs {counted(gap, 'minute')} apart; a routine runs at "
            f"most every {MIN_INTERVAL_MINUTES} minutes (the scheduler looks that often). Use "
            f"minutes such as */{MIN_INTERVAL_MINUTES} or intervalMinutes.",
            fields={"cron": f"Runs closer than {MIN_INTERVAL_MINUTES} minutes apart."},
        )


def shortest_gap(minutes, hours) -> int:
    """The fewest minutes between two slots of a cron with these MINUTES and HOURS (by the
    clock): two minutes of one hour, or an hour's last minute and the next hour's first when
    both hours are in it (23 and 0 count as next to each other: two days in a row may be)."""
    minutes = sorted(minutes)
    gaps = [later - earlier for earlier, later in pairwise(minutes)]
    if any((hour + 1) % 24 in hours for hour in hours):
        gaps.append(60 - minutes[-1] + minutes[0])
    return min(gaps, default=24 * 60)


def next_slot(routine, after: datetime) -> datetime:
    """ROUTINE's first slot strictly after AFTER."""
    if routine.interval_minutes:
        step = timedelta(minutes=routine.interval_minutes)
        anchor = routine.starts_at
        if after < anchor:
            return anchor + step
        return anchor + step * ((after - anchor) // step + 1)
    return _utc(next(iter(CronSim(routine.cron, after.astimezone(zone(routine.timezone))))))


def due_slots(routine, now: datetime) -> tuple[datetime, list[datetime], int]:
    """For a routine due at ``next_run_at``: (the latest slot at or before NOW, the earlier due
    slots — the first MAX_SKIPPED_LISTED of them — and how many earlier ones there are; for a
    cron, counted up to MAX_SKIPPED_COUNTED, which then stands for that many or more). One run
    stands for them all."""
    first = routine.next_run_at
    if routine.interval_minutes:
        step = timedelta(minutes=routine.interval_minutes)
        count = (now - first) // step
        listed = [first + i * step for i in range(min(count, MAX_SKIPPED_LISTED))]
        return first + count * step, listed, count
    latest, listed, count = first, [], 0
    for slot in map(_utc, CronSim(routine.cron, first.astimezone(zone(routine.timezone)))):
        if slot > now:
            break
        if count == MAX_SKIPPED_COUNTED:
            # Long downtime: the latest slot is found backwards from NOW, not walked up to.
            return _last_slot(routine, now), listed, count
        if len(listed) < MAX_SKIPPED_LISTED:
            listed.append(latest)
        latest, count = slot, count + 1
    return latest, listed, count


def _last_slot(routine, now: datetime) -> datetime:
    """ROUTINE's (a cron's) latest slot at or before NOW."""
    # Reversed, cronsim starts strictly before the second it is given.
    after = now.astimezone(zone(routine.timezone)).replace(microsecond=0) + timedelta(seconds=1)
    return _utc(next(iter(CronSim(routine.cron, after, reverse=True))))


def _utc(slot: datetime) -> datetime:
    """A cron's slot, read in its zone, as UTC: an hour the clock repeats (autumn) is ambiguous
    in the zone, and such a time never compares equal to one of another zone (PEP 495)."""
    return slot.astimezone(UTC)


def describe(routine) -> str:
    """The schedule in words, for people."""
    if routine.interval_minutes:
        minutes = routine.interval_minutes
        if minutes % (60 * 24) == 0:
            amount, unit = minutes // (60 * 24), "day"
        elif minutes % 60 == 0:
            amount, unit = minutes // 60, "hour"
        else:
            amount, unit = minutes, "minute"
        return f"Every {unit}" if amount == 1 else f"Every {amount} {unit}s"
    try:
        words = get_description(routine.cron)
    except Exception:  # an expression cronsim reads and cron-descriptor cannot put in words
        words = f"cron {routine.cron}"
    return f"{words} ({routine.timezone})"
