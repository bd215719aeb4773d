"""GET /healthz: is the database reachable, is Redis reachable (503 when either is not).
GET /livez: does this process answer (the load balancer's check)."""

from django.db import connection
from django.http import JsonResponse

from agntchat.core import presence


def healthz(request):
    checks = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["db"] = "ok"
    except Exception as exc:  # any failure means "down"; the reason helps the operator
        checks["db"] = f"error: {type(exc).__name__}"
    try:
        presence.client().ping()
        checks["redis"] = "ok"
    except Exception as exc:
        checks["redis"] = f"error: {type(exc).__name__}"
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "error", **checks}, status=200 if healthy else 503
    )


def livez(request):
    """The node answers. The balancer checks this, not /healthz: PostgreSQL or Redis out of reach
    is out of reach for every node alike, and taking them all out would answer each request
    with the balancer's bare page instead of the API's 503 that says what is down."""
    return JsonResponse({"status": "ok"})
