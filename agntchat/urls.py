from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from agntchat.core.api import error_body
from agntchat.core.health import healthz

api = [
    path("", include("workspaces.api")),
    path("", include("work.api")),
    path("", include("conversations.api")),
    path("", include("artifacts.api")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
]

urlpatterns = [
    path("healthz", healthz),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api)),
    path("", include("agntchat.ui.urls")),
]


def handler404(request, exception=None):
    """API paths answer in the API's error shape; pages get the normal page."""
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("not_found", "Not found."), status=404)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)
