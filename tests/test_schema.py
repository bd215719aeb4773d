"""The OpenAPI schema says what the server does (the full fuzzing run is `.ci/schemathesis`)."""

import re

import pytest
from drf_spectacular.generators import SchemaGenerator


@pytest.fixture(scope="module")
def schema():
    return SchemaGenerator().get_schema(request=None, public=True)


def test_each_operation_documents_the_status_codes_it_answers(schema):
    paths = schema["paths"]
    assert set(paths["/api/v1/agents/"]["post"]["responses"]) == {"201", "4XX"}
    assert set(paths["/api/v1/agents/{agentId}/keys/{keyId}/"]["delete"]["responses"]) == {
        "204",
        "4XX",
    }
    assert set(paths["/api/v1/tasks/{taskId}/cancel/"]["post"]["responses"]) == {
        "200",
        "202",
        "4XX",
    }
    for path, operations in paths.items():
        for method, operation in operations.items():
            error = operation["responses"]["4XX"]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/Error"}, (method, path)


def test_collections_are_pages_and_records_are_objects(schema):
    def body(path):
        return schema["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]

    assert body("/api/v1/agents/")["schema"] == {"$ref": "#/components/schemas/Page"}
    assert body("/api/v1/me/")["schema"] == {"type": "object"}


def test_request_bodies_are_as_strict_as_their_serializers(schema):
    agent = schema["components"]["schemas"]["AgentInput"]
    assert agent["additionalProperties"] is False
    name = agent["properties"]["name"]
    assert name["minLength"] == 1
    pattern = re.compile(name["pattern"])
    assert pattern.search("Nova") and not pattern.search("   ") and not pattern.search("a\x00b")
    # What DRF's trimming blanks, the pattern refuses (str.strip() takes \x1c-\x1f and \x85).
    for blank in ("\x1d", "\x85", " \t\u3000"):
        assert blank.strip() == "" and not pattern.search(blank)
    # A field whose own validator has a pattern keeps it.
    assert agent["properties"]["handle"]["pattern"] == "^[-a-zA-Z0-9_]+$"
    role = re.compile(agent["properties"]["role"]["pattern"])  # blank allowed, NUL never
    assert role.search("") and not role.search("x\x00")
    assert (
        "oneOf" not in agent["properties"]["role"]
        and "minLength" not in agent["properties"]["role"]
    )


def test_a_list_of_text_refuses_other_types(alice, api):
    response = api(alice).post(
        "/api/v1/agents/", {"name": "Nova", "capabilities": ["ok", 3]}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"capabilities": "Must be a string."}


@pytest.mark.django_db
def test_the_schema_browser_answers_get_and_refuses_other_methods(client):
    assert client.get("/api/v1/docs/").status_code == 200
    assert client.head("/api/v1/docs/").status_code == 200
    for method in ("options", "post", "delete"):
        assert getattr(client, method)("/api/v1/docs/").status_code == 405, method
