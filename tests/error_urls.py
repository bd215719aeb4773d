"""The project's URLs plus two views that fail, to see what a server error answers."""

from django.urls import path

from agntchat.urls import handler400, handler403, handler404, handler500  # noqa: F401
from agntchat.urls import urlpatterns as project_urlpatterns


def broken(request):
    raise RuntimeError("a bug")


urlpatterns = [
    path("api/v1/broken/", broken),
    path("broken/", broken),
    *project_urlpatterns,
]
