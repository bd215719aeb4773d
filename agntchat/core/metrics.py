"""Prometheus metrics (docs/operations.md) and GET /metrics.

Two sorts, on purpose:

- **Of this process**, kept in memory by prometheus_client: open sockets, claim and turn
  latencies, server errors, error frames. Each web node (one daphne process) is its own scrape
  target; Prometheus adds the nodes up (``sum without (instance)``). No multiprocess mode: a node
  is one process, and django-q2's forked workers serve no /metrics.
- **Of the whole deployment**, computed from PostgreSQL and Redis when scraped: queue depth per
  kind of work and agents online. Every node answers the same figures (take ``max``): nothing
  is counted on the hot path, so a post, a claim or an ack pays for none of it.
"""

import hmac
import ipaddress
import logging
import time

from django.conf import settings
from django.db import connection
from django.http import Http404, HttpResponse
from django.utils import timezone
from prometheus_client import REGISTRY, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from agntchat.core import presence

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
TURN_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)

OPEN_SOCKETS = Gauge(
    "agntchat_open_sockets", "WebSockets open in this process, by kind.", ["socket"]
)
CLAIM_SECONDS = Histogram(
    "agntchat_claim_seconds",
    "One claim statement (SKIP LOCKED, lease, payload read), by kind of work, when it took items.",
    ["kind"],
    buckets=LATENCY_BUCKETS,
)
CLAIM_WAIT_SECONDS = Histogram(
    "agntchat_claim_wait_seconds",
    "From an item queued (the message posted, the task created) to its claim, by kind.",
    ["kind"],
    buckets=LATENCY_BUCKETS + (30, 60, 300),
)
TURN_SECONDS = Histogram(
    "agntchat_turn_seconds",
    "An agent's turn as its bridge reported it (latency in its usage), by backend.",
    ["backend"],
    buckets=TURN_BUCKETS,
)
HTTP_ERRORS = Counter(
    "agntchat_http_server_errors", "HTTP responses with a 5xx status, by status.", ["status"]
)
ERROR_FRAMES = Counter(
    "agntchat_error_frames", "Error frames sent on sockets, by socket and code.", ["socket", "code"]
)
SOCKET_FAILURES = Counter(
    "agntchat_socket_failures", "Sockets hung up because a handler failed (close 4500).", ["socket"]
)

# Claimable queue models by kind of work, filled by the app that defines the kinds
# (work.gateway.WORK_KINDS, registered in its AppConfig.ready): core knows no app.
QUEUES: dict = {}

DEPTH_SQL = """
SELECT count(*) FILTER (WHERE {ready} AND (claimed_by IS NULL OR lease_expires_at < %(now)s)),
       count(*) FILTER (WHERE claimed_by IS NOT NULL AND lease_expires_at >= %(now)s),
       count(*) FILTER (WHERE NOT ({ready}) AND claimed_by IS NULL)
  FROM {table} q WHERE q.acked_at IS NULL
"""


def queue_depths(now=None) -> dict:
    """{kind: (queued, in_flight, waiting)}: open items ready to claim (never claimed or their
    lease ran out), claimed under a live lease, and not claimable yet (a permission request
    until a person decides). One statement per kind, on the open-rows index."""
    now = now or timezone.now()
    out = {}
    with connection.cursor() as cursor:
        for kind, model in QUEUES.items():
            table = connection.ops.quote_name(model._meta.db_table)
            ready = model.claim_ready_sql or "TRUE"
            cursor.execute(DEPTH_SQL.format(table=table, ready=ready), {"now": now})
            out[kind] = cursor.fetchone()
    return out


class DeploymentCollector:
    """Figures read from PostgreSQL and Redis at scrape time."""

    def describe(self):
        # What registering asks for: without it, the registry would collect (query PostgreSQL
        # and Redis) at import time, before a test database or a server is even there.
        yield self.depth_family()
        yield self.online_family()

    @staticmethod
    def depth_family():
        return GaugeMetricFamily(
            "agntchat_queue_depth",
            "Open items of agent work by kind and state (queued: ready to claim; in_flight: "
            "claimed under a live lease; waiting: not claimable yet).",
            labels=["kind", "state"],
        )

    @staticmethod
    def online_family():
        return GaugeMetricFamily(
            "agntchat_agents_online", "Agents with at least one live bridge connection."
        )

    def collect(self):
        # A store out of reach leaves its figures out, not the scrape: the process's own
        # figures matter most during an outage (a 500 would lose them all).
        try:
            depths = queue_depths()
        except Exception as exc:
            log.warning("metrics: queue depth unavailable: %r", exc)
        else:
            depth = self.depth_family()
            for kind, (queued, in_flight, waiting) in depths.items():
                depth.add_metric([kind, "queued"], queued)
                depth.add_metric([kind, "in_flight"], in_flight)
                depth.add_metric([kind, "waiting"], waiting)
            yield depth
        try:
            count = presence.online_count()
        except Exception as exc:
            log.warning("metrics: agents online unavailable: %r", exc)
        else:
            online = self.online_family()
            online.add_metric([], count)
            yield online


_collector = DeploymentCollector()
REGISTRY.register(_collector)


def stopwatch():
    """``elapsed = stopwatch(); …; histogram.observe(elapsed())``: seconds since the call."""
    start = time.perf_counter()
    return lambda: time.perf_counter() - start


def allowed(request) -> bool:
    """A bearer token equal to METRICS_TOKEN, or a client address in METRICS_ALLOWED_ADDRESSES."""
    token = settings.METRICS_TOKEN
    given = request.headers.get("Authorization", "")
    if token and given.startswith("Bearer "):
        if hmac.compare_digest(given.removeprefix("Bearer ").strip().encode(), token.encode()):
            return True
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # an IPv4 client of a server bound to "::"
    for entry in settings.METRICS_ALLOWED_ADDRESSES:
        try:
            if address in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def metrics_view(request):
    """GET /metrics in the Prometheus text format; to anyone not allowed it does not exist."""
    if not allowed(request):
        raise Http404()
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


class ServerErrorMetrics:
    """Middleware: counts responses with a 5xx status (a view that raised included: Django
    turns the exception into a 500 response before it gets here)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code >= 500:
            HTTP_ERRORS.labels(str(response.status_code)).inc()
        return response
