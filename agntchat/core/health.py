"""GET /healthz: is the database reachable, is Redis reachable (503 when either is not)."""

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
