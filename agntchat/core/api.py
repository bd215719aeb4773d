"""The REST edge shared by every app: camelCase in and out, one error shape."""

import io
import logging
import zoneinfo

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpResponse
from djangorestframework_camel_case.parser import CamelCaseJSONParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rest_framework import exceptions, renderers, serializers
from rest_framework.response import Response
from rest_framework.views import set_rollback

from agntchat.core.events import json_bytes, wire
from agntchat.core.exceptions import AppError
from agntchat.core.validation import check_json_text

log = logging.getLogger(__name__)


class CamelCaseRenderer(renderers.JSONRenderer):
    """Every record leaving the API is camelCase, converted here and nowhere else: by ``wire``,
    as sockets and live events convert theirs, so a message reads the same (timestamps to the
    millisecond) over REST and live."""

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        return b"" if data is None else json_bytes(wire(data))


class CamelCaseParser(CamelCaseJSONParser):
    """Every body entering the API is checked for size and depth (before anything parses it:
    the parser recurses once per level) and snake_cased here before serializers see it."""

    def parse(self, stream, media_type=None, parser_context=None):
        # DRF hands over the body Django read (and refused past the limit: a 413 from
        # urls.handler400); were it a stream, a byte past the limit tells a body over it.
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        body = stream.read(limit + 1)
        check_json_text(body, max_bytes=limit)
        return super().parse(io.BytesIO(body), media_type, parser_context)


def error_body(code: str, message: str, fields: dict | None = None) -> dict:
    body = {"code": code, "message": message}
    if fields:
        body["fields"] = fields
    return {"error": body}


# What answers an API request that failed before (or outside) any view: by HTTP status.
HTTP_ERRORS = {
    400: ("bad_request", "The request could not be understood."),
    403: ("permission_denied", "You do not have permission to do this."),
    404: ("not_found", "Not found."),
    413: ("too_large", "The request body is larger than this server accepts."),
    500: ("server_error", "Something went wrong on our side. It has been logged."),
}


def error_response(status: int) -> HttpResponse:
    """The error shape for STATUS, for Django's error handlers (no DRF view was reached)."""
    code, message = HTTP_ERRORS[status]
    return HttpResponse(
        json_bytes(error_body(code, message)), status=status, content_type="application/json"
    )


def _flatten(detail):
    """DRF error details → plain strings (first message per field), recursively for nesting."""
    if isinstance(detail, dict):
        return {key: _flatten(value) for key, value in detail.items()}
    if isinstance(detail, list):
        if detail and all(isinstance(item, (str, exceptions.ErrorDetail)) for item in detail):
            return " ".join(str(item) for item in detail)
        return [_flatten(item) for item in detail]
    return str(detail)


# A store that cannot be reached (restarting, failed over): the request changed nothing and can
# be sent again, so it gets a 503 that says so, not a bare 500 (docs/operations.md, "Faults").
UNAVAILABLE = {
    (OperationalError, InterfaceError): (
        "database_unavailable",
        "The database is unavailable right now; nothing was saved. Try again in a moment.",
    ),
    (RedisConnectionError, RedisTimeoutError): (
        "service_unavailable",
        "A service this server needs is unavailable right now; try again in a moment.",
    ),
}


def exception_handler(exc, context):
    """Map every refusal to ``{"error": {"code", "message", "fields"}}`` with a 4xx status,
    and a store out of reach to a 503."""
    for kinds, (code, message) in UNAVAILABLE.items():
        if isinstance(exc, kinds):
            log.warning("refused with 503: %s", exc)
            set_rollback()
            return Response(error_body(code, message), status=503, headers={"Retry-After": "5"})
    if isinstance(exc, AppError):
        set_rollback()
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
        return Response(
            error_body(exc.code, exc.message, exc.fields), status=exc.status, headers=headers
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if not isinstance(exc, exceptions.APIException):
        return None
    set_rollback()
    headers = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    if isinstance(exc, exceptions.ValidationError):
        detail = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        fields = _flatten(detail)
        message = "Some fields are invalid." if fields else "Invalid input."
        if set(fields) == {"non_field_errors"}:
            message = fields.pop("non_field_errors")
        return Response(error_body("invalid", message, fields), status=400, headers=headers)
    code = exc.get_codes() if isinstance(exc.get_codes(), str) else exc.default_code
    return Response(error_body(code, str(exc.detail)), status=exc.status_code, headers=headers)


def _wrong_type(field, value) -> str | None:
    """What VALUE should have been for FIELD, or None when its JSON type is right. DRF would
    quietly turn 123 into "123", 0 into False and false into a UUID; a wrong type is an error."""
    if value is None:
        return None
    if isinstance(field, (serializers.CharField, serializers.UUIDField)):
        return None if isinstance(value, str) else "Must be a string."
    if isinstance(field, serializers.BooleanField):
        return None if isinstance(value, bool) else "Must be true or false."
    if isinstance(field, serializers.IntegerField):
        whole = isinstance(value, int) and not isinstance(value, bool)
        return None if whole else "Must be a whole number."
    if isinstance(field, serializers.ListField) and isinstance(value, list):
        return next((w for w in (_wrong_type(field.child, v) for v in value) if w), None)
    return None


class StrictSerializer(serializers.Serializer):
    """Rejects unknown fields (a typo in a request is an error, not silently ignored) and values
    of the wrong JSON type. ``min_fields``: how many fields a body must name at least (a PATCH
    that changes nothing is refused); the schema says so too."""

    min_fields = 0

    def to_internal_value(self, data):
        if isinstance(data, dict):
            # Required fields missing say so themselves (a partial update requires none);
            # otherwise an empty change is refused.
            says_itself = not self.partial and any(f.required for f in self.fields.values())
            if len(data) < self.min_fields and not says_itself:
                raise serializers.ValidationError(
                    {"non_field_errors": ["Nothing to change: name a field to change."]}
                )
            unknown = set(data) - set(self.fields)
            if unknown:
                raise serializers.ValidationError(
                    {name: "Unknown field." for name in sorted(unknown)}
                )
            wrong = {
                name: problem
                for name, field in self.fields.items()
                if (problem := _wrong_type(field, data.get(name)))
            }
            if wrong:
                raise serializers.ValidationError(wrong)
        return super().to_internal_value(data)


def validated(serializer_class, data, **context) -> dict:
    """Validate request data with SERIALIZER_CLASS; a failure becomes the 400 error shape."""
    serializer = serializer_class(data=data, context=context)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def page_of(rows, page: int, limit: int) -> tuple[list, bool]:
    """Page PAGE (from 1) of ROWS, LIMIT a page, and whether more lie beyond: every row of a
    long list can be reached."""
    start = (page - 1) * limit
    found = list(rows[start : start + limit + 1])
    return found[:limit], len(found) > limit


# Every IANA time zone name this Python knows: what a person's or a schedule's zone may be.
ZONE_NAMES = sorted(zoneinfo.available_timezones())


def zone_field(**options) -> serializers.ChoiceField:
    return serializers.ChoiceField(choices=ZONE_NAMES, **options)
