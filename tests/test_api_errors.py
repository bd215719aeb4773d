"""Every API error, of every kind, answers in the one error shape: {"error": {"code", "message"}}
with a JSON content type, never an HTML page (Alice calls the API with her token)."""

import json

import pytest

pytestmark = pytest.mark.django_db

LIMIT = 10_000  # DATA_UPLOAD_MAX_MEMORY_SIZE for these tests: a small body can pass it
DEEP_ARRAYS = b'{"body": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
DEEP_OBJECTS = b'{"body": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_000 + b"}"

CASES = {
    "malformed JSON": ("POST", "messages", b"{nope", "application/json", 400, "parse_error"),
    "not UTF-8": ("POST", "messages", b'{"body": "\xff"}', "application/json", 400, "parse_error"),
    "arrays nested too deeply": ("POST", "messages", DEEP_ARRAYS[:9000] + b"]}", "application/json", 400, "too_deep"),
    "objects nested too deeply": ("POST", "messages", DEEP_OBJECTS[:9000], "application/json", 400, "too_deep"),
    "over the size limit": ("POST", "messages", b'{"body": "' + b"x" * LIMIT + b'"}', "application/json", 413, "too_large"),
    "not JSON": ("POST", "messages", b"body=hi", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
    "unknown API URL": ("GET", "/api/v1/nowhere/", b"", None, 404, "not_found"),
    "unknown API URL, posted to": ("POST", "/api/v1/nowhere/", b"{}", "application/json", 404, "not_found"),
    "method not allowed": ("DELETE", "/api/v1/card-templates/", b"", None, 405, "method_not_allowed"),
    "server error": ("GET", "/api/v1/broken/", b"", None, 500, "server_error"),
    # A store out of reach: a 503 to retry (docs/operations.md, "Faults").
    "database down": ("GET", "/api/v1/database-down/", b"", None, 503, "database_unavailable"),
    "Redis down": ("GET", "/api/v1/redis-down/", b"", None, 503, "service_unavailable"),
}  # fmt: skip


@pytest.fixture
def limited(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = LIMIT
    settings.ROOT_URLCONF = "tests.error_urls"


def assert_error(response, status: int, code: str) -> None:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"] == "application/json"
    error = json.loads(response.content)["error"]
    assert error["code"] == code
    assert isinstance(error["message"], str) and error["message"]


@pytest.mark.parametrize(
    ("method", "url", "body", "content_type", "status", "code"), CASES.values(), ids=CASES.keys()
)
def test_every_api_error_is_the_json_error_shape(
    alice, channel, api, limited, method, url, body, content_type, status, code
):
    client = api(alice)
    client.raise_request_exception = False  # answer as the server would, not raise in the test
    if url == "messages":
        url = f"/api/v1/conversations/{channel.id}/messages/"
    extra = {"content_type": content_type} if content_type else {}
    before = channel.messages.count()
    response = client.generic(method, url, body, **extra)
    assert_error(response, status, code)
    assert channel.messages.count() == before


def test_an_unauthenticated_request_is_the_json_error_shape(channel, client):
    response = client.get(f"/api/v1/conversations/{channel.id}/messages/")
    assert_error(response, 401, "not_authenticated")


def test_pages_keep_their_html_error_pages(alice, client, limited):
    client.raise_request_exception = False
    client.force_login(alice)
    missing = client.get("/w/00000000-0000-0000-0000-000000000000/")
    broken = client.get("/broken/")
    assert missing.status_code == 404 and missing["Content-Type"].startswith("text/html")
    assert broken.status_code == 500 and broken["Content-Type"].startswith("text/html")
