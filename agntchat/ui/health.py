"""The staff health page (/staff/health/): each part of the deployment, green or red with the
reason. /healthz stays the load balancer's two-line check; this page is for a person.

Parts: the database and Redis (a round trip each, timed), the worker (django-q2's queue in
PostgreSQL: jobs waiting and for how long, the last job it finished), schedules past their run,
and the bridges (agents online, when each was last seen, agents offline with work waiting).
"""

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import redis
from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.db import connection
from django.db.models import Max, Min
from django.http import Http404
from django.shortcuts import render
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ, Schedule
from django_q.models import Task as Job

from agents.models import Agent
from agntchat.core import presence
from conversations.models import Delivery

# Agents listed on the page (by name); the counts cover every agent.
AGENTS_SHOWN = 200


@dataclass
class Part:
    name: str
    ok: bool = True
    reason: str = ""
    rows: list = field(default_factory=list)  # (label, value) details


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _ago(moment, now) -> str:
    if moment is None:
        return "never"
    seconds = max(0, int((now - moment).total_seconds()))
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 7200:
        return f"{seconds // 60} min ago"
    return f"{seconds // 3600} h ago"


def check_database() -> Part:
    part = Part("Database")
    try:
        start = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        elapsed = time.perf_counter() - start
        part.reason = f"answered in {_ms(elapsed)}"
        part.rows.append(("vendor", f"PostgreSQL {connection.pg_version // 10000}"))
    except Exception as exc:  # any failure is "down"; its kind is the reason
        part.ok, part.reason = False, f"unreachable: {type(exc).__name__}: {exc}"[:300]
    return part


def check_redis() -> Part:
    """A fresh connection to settings.REDIS_URL (not the shared client: this checks the server
    the settings name now), with a short timeout."""
    part = Part("Redis")
    try:
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1
        )
        start = time.perf_counter()
        client.ping()
        elapsed = time.perf_counter() - start
        client.close()
        part.reason = f"answered in {_ms(elapsed)}"
    except Exception as exc:
        part.ok, part.reason = False, f"unreachable: {type(exc).__name__}: {exc}"[:300]
    return part


def check_worker(now) -> tuple[Part, Part]:
    """The worker (django-q2, ORM broker) and the schedules it runs. With no process reporting
    a heartbeat to the web, its life shows in PostgreSQL: jobs waiting too long, schedules past
    their run, the last job finished."""
    worker, schedules = Part("Worker (django-q2)"), Part("Schedules")
    grace = timedelta(seconds=settings.HEALTH_WORKER_GRACE_SECONDS)
    try:
        waiting = OrmQ.objects.filter(key=Conf.CLUSTER_NAME, lock__lte=now).aggregate(
            oldest=Min("lock")
        )["oldest"]
        queued = OrmQ.objects.filter(key=Conf.CLUSTER_NAME, lock__lte=now).count()
        last = Job.objects.aggregate(last=Max("stopped"))["last"]
        late = list(
            Schedule.objects.filter(next_run__lt=now - grace)
            .exclude(repeats=0)
            .order_by("next_run")
            .values_list("name", "func", "next_run")
        )
    except Exception as exc:
        reason = f"cannot read its tables: {type(exc).__name__}"
        return Part(worker.name, False, reason), Part(schedules.name, False, reason)
    worker.rows = [
        ("queue", f"{Conf.CLUSTER_NAME} (ORM broker)"),
        ("jobs waiting", str(queued)),
        ("oldest waiting", _ago(waiting, now) if waiting else "none"),
        ("last job finished", _ago(last, now)),
    ]
    if waiting is not None and now - waiting > grace:
        worker.ok = False
        worker.reason = f"a job has waited {_ago(waiting, now)[:-4]}: is the worker running?"
    elif late:
        worker.ok = False
        worker.reason = f"{len(late)} schedule(s) past their run: is the worker running?"
    else:
        worker.reason = f"{queued} job(s) waiting; last job finished {_ago(last, now)}"
    schedules.rows = [(name or func, f"due {_ago(due, now)}") for name, func, due in late]
    if late:
        schedules.ok = False
        schedules.reason = f"{len(late)} past their run by more than {grace.seconds} s"
    else:
        schedules.reason = f"none past their run by more than {grace.seconds} s"
    return worker, schedules


def check_bridges(now) -> Part:
    part = Part("Bridges")
    agents = list(Agent.objects.order_by("name", "id").values_list("id", "name")[:AGENTS_SHOWN])
    total = Agent.objects.count()
    shown = [agent_id for agent_id, _ in agents]
    waiting = set(
        Delivery.objects.filter(agent_id__in=shown, acked_at__isnull=True, claimed_by__isnull=True)
        .values_list("agent_id", flat=True)
        .distinct()
    )
    try:
        online = presence.online(shown)
        seen = presence.last_seen(shown)
        count = presence.online_count()  # every agent's, not only those listed
    except Exception as exc:
        part.ok, part.reason = False, f"presence unknown (Redis: {type(exc).__name__})"
        return part
    stranded = []
    for agent_id, name in agents:
        moment = seen.get(agent_id)
        moment = datetime.fromtimestamp(moment, UTC) if moment is not None else None
        state = "online" if online[agent_id] else "offline"
        if not online[agent_id] and agent_id in waiting:
            state += ", messages waiting"
            stranded.append(name)
        part.rows.append((name, f"{state} · last seen {_ago(moment, now)}"))
    part.reason = f"{count} of {total} agents online"
    if stranded:
        # Shown, not a fault: an agent whose owner switched its bridge off (a laptop asleep) is
        # that owner's business, and any tenant could otherwise turn the page red (503) at will.
        part.reason += f"; offline with messages waiting: {', '.join(stranded[:5])}"
    return part


def health_page(request):
    """Staff only: an anonymous visitor is sent to sign in; anyone else is told nothing."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if not request.user.is_staff:
        raise Http404()
    now = timezone.now()
    parts = [check_database(), check_redis(), *check_worker(now), check_bridges(now)]
    status = 200 if all(part.ok for part in parts) else 503
    return render(request, "ui/health.html", {"parts": parts, "checked_at": now}, status=status)
