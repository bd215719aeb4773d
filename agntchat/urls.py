from django.contrib import admin
from django.core.exceptions import RequestDataTooBig
from django.urls import include, path
from django.views import defaults
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from agntchat.core.api import error_response
from agntchat.core.health import healthz, livez
from agntchat.core.metrics import metrics_view
from agntchat.ui.health import health_page
from integrations.telegram_api import webhook_urlpatterns

# Django walks these in order, and each module passed on is walked in full (building the list
# of patterns tried): the messages' module first, the busiest by far (a sixth of a message
# POST's URL resolving went on the modules before it). No path is in two modules.
api = [
    path("", include("conversations.api")),
    path("", include("workspaces.api")),
    path("", include("workspaces.notifications_api")),
    path("", include("work.api")),
    path("", include("work.tools.api")),
    path("", include("work.memory_api")),
    path("", include("work.skills_api")),
    path("", include("work.directory_api")),
    path("", include("work.map_api")),
    path("", include("work.search_api")),
    path("", include("work.hosts_api")),
    path("", include("routines.api")),
    path("", include("integrations.api")),
    path("", include("conversations.streaming_api")),
    path("", include("artifacts.api")),
    path("", include("artifacts.export_api")),
    path("", include("integrations.sources_api")),
    path("", include("integrations.telegram_api")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # GET only: its OPTIONS rendered DRF's metadata through a template it has none of (a 500).
    path(
        "docs/",
        SpectacularSwaggerView.as_view(url_name="schema", http_method_names=["get", "head"]),
        name="api-docs",
    ),
]

urlpatterns = [
    path("healthz", healthz),
    path("livez", livez),  # the load balancer's check
    path("metrics", metrics_view),  # Prometheus; token or allowed addresses only
    path("staff/health/", health_page, name="staff-health"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api)),
    path("", include("conversations.files")),  # signed download links (INT-4)
    path("", include(webhook_urlpatterns)),  # Telegram's updates (docs/telegram.md)
    path("", include("agntchat.ui.urls")),
]


# Errors Django answers itself (no view reached, or a view raised): API paths answer in the API's
# error shape, pages get the product's pages (templates/404.html, templates/500.html).


def is_api(request) -> bool:
    return request.path.startswith("/api/")


def handler400(request, exception=None):
    if is_api(request):
        return error_response(413 if isinstance(exception, RequestDataTooBig) else 400)
    return defaults.bad_request(request, exception)


def handler403(request, exception=None):
    return (
        error_response(403) if is_api(request) else defaults.permission_denied(request, exception)
    )


def handler404(request, exception=None):
    return error_response(404) if is_api(request) else defaults.page_not_found(request, exception)


def handler500(request):
    return error_response(500) if is_api(request) else defaults.server_error(request)
