"""The product's URLs plus a bare baseline endpoint the pipeline benchmark compares against."""

from django.db import connection
from django.urls import include, path
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from agntchat.urls import handler404  # noqa: F401  (the product's API-shaped 404)

BASELINE_TABLE = "bench_baseline"


class BaselineView(APIView):
    """A bare DRF endpoint: no auth, insert one row, answer 201."""

    authentication_classes = ()
    permission_classes = (AllowAny,)

    def post(self, request):
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {BASELINE_TABLE} (body) VALUES (%s) RETURNING id",
                [str(request.data.get("body", ""))[:200]],
            )
            (row_id,) = cursor.fetchone()
        return Response({"id": row_id}, status=201)


urlpatterns = [
    path("bench/baseline/", BaselineView.as_view()),
    path("", include("agntchat.urls")),
]
