"""OpenAPI for our plain APIViews, true to what the server answers: bodies declared per method,
the status codes each operation returns, the one error shape for every 4xx, request constraints
as strict as the serializers that enforce them (checked by schemathesis in `.ci/schemathesis`)."""

import re

from django.core.validators import RegexValidator
from drf_spectacular import openapi
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import ResolvedComponent, force_instance
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers

from agntchat.core.api import StrictSerializer

# Success codes by method; a view whose operation answers otherwise declares
# ``statuses = {"post": (200,)}``.
DEFAULT_STATUSES = {"GET": (200,), "POST": (201,), "PUT": (200,), "PATCH": (200,), "DELETE": (204,)}

ERROR = ResolvedComponent(
    name="Error",
    type=ResolvedComponent.SCHEMA,
    object="Error",
    schema={
        "type": "object",
        "description": "Every refusal, of every kind, has this shape.",
        "properties": {
            "error": {
                "type": "object",
                "properties": {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "fields": {"type": "object", "description": "Field name → what is wrong."},
                },
                "required": ["code", "message"],
            }
        },
        "required": ["error"],
    },
)
PAGE = ResolvedComponent(
    name="Page",
    type=ResolvedComponent.SCHEMA,
    object="Page",
    schema={
        "type": "object",
        "description": "A collection: its records under ``results``.",
        "properties": {"results": {"type": "array", "items": {"type": "object"}}},
        "required": ["results"],
    },
)
RECORD = {"type": "object"}

# Text the server accepts: no NUL (PostgreSQL cannot store it), and when blank is refused, at
# least one character that Python's strip() keeps (DRF trims before checking; it strips
# \x1c-\x1f and \x85 too, which a regex's \s may not).
NO_NUL = r"^[^\x00]*$"
NOT_BLANK = r"^[^\x00]*[^\s\x00\x1c-\x1f\x85][^\x00]*$"


class AutoSchema(openapi.AutoSchema):
    """Views declare request bodies as ``inputs = {"post": SomeSerializer}``, query parameters as
    ``queries``, success codes other than the method's usual as ``statuses``; responses are
    camelCase JSON objects (each endpoint's tests pin their exact shape)."""

    def get_request_serializer(self):
        declared = getattr(self.view, "inputs", {}).get(self.method.lower())
        if declared is not None:
            return declared
        return OpenApiTypes.OBJECT if self.method in ("POST", "PUT", "PATCH") else None

    def get_override_parameters(self):
        # Views declare query parameters as ``queries = {"get": SomeSerializer}``.
        declared = getattr(self.view, "queries", {}).get(self.method.lower())
        return [declared] if declared is not None else []

    def _get_request_body(self, direction="request"):
        body = super()._get_request_body(direction)
        serializer = force_instance(self.get_request_serializer())
        if body and isinstance(serializer, StrictSerializer) and serializer.min_fields:
            body["required"] = True  # a PATCH must name something to change
        if body and isinstance(serializer, PolymorphicProxySerializer):
            body["required"] = True  # one of several shapes, each with required fields
        return body

    def _is_list_view(self, serializer=None):
        # A collection path ends in a literal segment, an item path in a {parameter}; its
        # response is a Page object (built in _get_response_bodies), not a bare array.
        return (
            self.method == "GET"
            and getattr(self.view, "is_collection", True)
            and not re.search(r"\{\w+\}/?$", self.path)
        )

    def _get_response_bodies(self, direction="response"):
        declared = getattr(self.view, "statuses", {}).get(self.method.lower())
        body = self._ref(PAGE) if self._is_list_view() else RECORD
        # A download declares its media type: ``files = {"get": "application/zip"}``.
        download = getattr(self.view, "files", {}).get(self.method.lower())
        responses = {}
        for code in declared or DEFAULT_STATUSES[self.method]:
            if download:
                responses[str(code)] = {
                    "content": {download: {"schema": {"type": "string", "format": "binary"}}},
                    "description": "A file, as an attachment.",
                }
            elif code == 204:
                responses["204"] = {"description": "No content."}
            else:
                responses[str(code)] = {
                    "content": {"application/json": {"schema": body}},
                    "description": "",
                }
        responses["4XX"] = {
            "content": {"application/json": {"schema": self._ref(ERROR)}},
            "description": "Refused: bad input (400), not signed in (401), not allowed (403), "
            "not found or not visible (404), conflict (409), too large (413), too many (429).",
        }
        # An operation that reaches outside (``upstream = {"post": "what"}``) says when that
        # failed: 502, in the same error shape.
        upstream = getattr(self.view, "upstream", {}).get(self.method.lower())
        if upstream:
            responses["502"] = {
                "content": {"application/json": {"schema": self._ref(ERROR)}},
                "description": upstream,
            }
        return responses

    def _ref(self, component: ResolvedComponent) -> dict:
        self.registry.register_on_missing(component)
        return component.ref

    def _map_basic_serializer(self, serializer, direction):
        schema = super()._map_basic_serializer(serializer, direction)
        serializer = force_instance(serializer)
        if direction == "request" and isinstance(serializer, StrictSerializer):
            schema["additionalProperties"] = False  # unknown fields are refused
            if serializer.min_fields:
                schema["minProperties"] = serializer.min_fields
            if serializer.partial:
                schema.pop("required", None)  # a serializer that is always partial (an update)
            for name, prop in schema.get("properties", {}).items():
                # DRF's "or blank" becomes oneOf [text, blank]; "" matches both branches, which
                # oneOf forbids. Plain text that may be blank is one schema.
                text, *blank = prop.get("oneOf", [None])
                if blank == [{"type": "string", "maxLength": 0}] and "format" not in text:
                    schema["properties"][name] = text
        return schema

    def _map_serializer_field(self, field, direction, bypass_extensions=False):
        schema = super()._map_serializer_field(field, direction, bypass_extensions)
        if (
            direction == "request"
            and isinstance(field, serializers.CharField)
            and schema.get("type") == "string"
            and "pattern" not in schema
            and "format" not in schema
            and "enum" not in schema
            and not any(isinstance(v, RegexValidator) for v in field.validators)
        ):
            schema["pattern"] = NO_NUL if field.allow_blank else NOT_BLANK
            if not field.allow_blank:
                schema.setdefault("minLength", 1)
        return schema


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "agents.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal token (apt_…) or an agent session token (ags_…).",
        }
