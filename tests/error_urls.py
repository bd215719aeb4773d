"""The project's URLs plus views that fail, to see what a server error answers."""

from django.db import OperationalError
from django.urls import path
from redis.exceptions import ConnectionError as RedisConnectionError
from rest_framework.decorators import api_view

from agntchat.urls import handler400, handler403, handler404, handler500  # noqa: F401
from agntchat.urls import urlpatterns as project_urlpatterns


def broken(request):
    raise RuntimeError("a bug")


@api_view(["GET"])
def database_down(request):
    raise OperationalError("connection to server on socket failed")


@api_view(["GET"])
def redis_down(request):
    raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


urlpatterns = [
    path("api/v1/broken/", broken),
    path("api/v1/database-down/", database_down),
    path("api/v1/redis-down/", redis_down),
    path("broken/", broken),
    *project_urlpatterns,
]
