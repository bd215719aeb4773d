"""OpenAPI for our plain APIViews: bodies declared per method, bearer auth, stable operation ids."""

import re

from drf_spectacular import openapi
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes


class AutoSchema(openapi.AutoSchema):
    """Views declare request bodies as ``inputs = {"post": SomeSerializer}``; responses are
    camelCase JSON objects (see each endpoint's tests for their exact shape)."""

    def get_request_serializer(self):
        declared = getattr(self.view, "inputs", {}).get(self.method.lower())
        if declared is not None:
            return declared
        return OpenApiTypes.OBJECT if self.method in ("POST", "PUT", "PATCH") else None

    def get_response_serializers(self):
        return OpenApiTypes.OBJECT

    def _is_list_view(self, serializer=None):
        # A collection path ends in a literal segment, an item path in a {parameter}.
        return self.method == "GET" and not re.search(r"\{\w+\}/?$", self.path)


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "agntchat.core.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal token (apt_…) or an agent session token (ags_…).",
        }
