"""When a routine is due: every N minutes from when it was set up, or at the times of a cron
expression (``cronsim``) read in the routine's time zone; and the same said in words
(``cron-descriptor``)."""

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cron_descriptor import get_description
from cronsim import CronSim, CronSimError

from agntchat.core.exceptions import AppError

MIN_INTERVAL_MINUTES = 5  # the scheduler looks every 5 minutes
MAX_INTERVAL_MINUTES = 60 * 24 * 366
# Past this many missed slots the catch-up run stops counting them one by one.
MAX_SKIPPED_LISTED = 100


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
        try:
            CronSim(cron, datetime.now(zone(timezone)))
        except (CronSimError, ValueError) as exc:
            raise ScheduleInvalid(
                f"{cron!r} is not a cron expression ({exc}); five fields, such as "
                "'0 9 * * 1-5' for 9:00 on weekdays.",
                fields={"cron": "Not a cron expression."},
            ) from None


def next_slot(routine, after: datetime) -> datetime:
    """ROUTINE's first slot strictly after AFTER."""
    if routine.interval_minutes:
        step = timedelta(minutes=routine.interval_minutes)
        anchor = routine.starts_at
        if after < anchor:
            return anchor + step
        return anchor + step * ((after - anchor) // step + 1)
    return next(iter(CronSim(routine.cron, after.astimezone(zone(routine.timezone)))))


def due_slots(routine, now: datetime) -> tuple[datetime, list[datetime], int]:
    """For a routine due at ``next_run_at``: (the latest slot at or before NOW, the earlier due
    slots — the first MAX_SKIPPED_LISTED of them — and how many earlier ones there are). One run
    stands for them all."""
    first = routine.next_run_at
    if routine.interval_minutes:
        step = timedelta(minutes=routine.interval_minutes)
        count = (now - first) // step
        listed = [first + i * step for i in range(min(count, MAX_SKIPPED_LISTED))]
        return first + count * step, listed, count
    latest, listed, count = first, [], 0
    for slot in CronSim(routine.cron, first.astimezone(zone(routine.timezone))):
        if slot > now:
            break
        if len(listed) < MAX_SKIPPED_LISTED:
            listed.append(latest)
        latest, count = slot, count + 1
    return latest, listed, count


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
