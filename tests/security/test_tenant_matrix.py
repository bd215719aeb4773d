"""The tenant matrix (issue 27): every HTTP endpoint, with every id in its path naming a real row
of Alice's team A, asked by everyone who must get nothing of it: Dora (signed in, in no workspace
involved), Charlie (a member of another workspace, also naming his own workspace around Alice's
rows), Charlie's agent Spy (in none of team A's conversations), and someone holding Alice's revoked
token, Nova's expired session, a host's token, or nothing at all. The answer is 404 (a wrong id
is not found, never 403 with details) or 401 (no valid credentials), and no table changes.

The endpoints come from the URL resolver itself, so a new one with no case here fails
``test_every_endpoint_is_in_the_matrix``."""

import re
import uuid

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator

from tests.conftest import built_once
from tests.security.world import SKILL_MD, build_world, changed, checksum, tables_checksum_sql

pytestmark = pytest.mark.django_db

# Public by design or guarded by something other than a workspace: answered to anyone, each for
# a reason. Everything else is in the matrix.
EXEMPT = {
    "healthz": "monitoring's probe: no tenant data",
    "livez": "load balancer's probe: no tenant data",
    "metrics": "Prometheus; its own token or allowed addresses (tests/test_observability.py)",
    "staff/health/": "staff only (tests/ui/test_health_page.py)",
    "api/v1/auth/token/": "the password sign-in itself, throttled (tests/workspaces)",
    "api/v1/schema/": "the OpenAPI schema: public",
    "api/v1/docs/": "the schema's browser: public",
    "api/v1/agent/session/": "exchanges an agent key or placement token; checked below",
    "api/v1/invitations/accept/": "the invitation's secret is the credential",
    "invite/<str:token>/": "the invitation's secret is the credential",
    "account/verify/<str:token>/": "signed for one person, used only signed in as them "
    "(tests/workspaces/test_accounts.py)",
    "files/<uuid:attachment_id>/<str:name>": "signed links; checked below",
    "telegram/<uuid:bot_id>/webhook/": "Telegram's secret header (tests/integrations)",
    "oauth/<str:provider>/callback": "the OAuth state is the credential (tests/integrations)",
    "": "the home page: one's own workspaces",
    "login/": "sign in",
    "logout/": "sign out",
    "signup/": "sign up",
    "w/new/": "a new workspace of one's own",
}

# Endpoints without an id in their path: a signed-in intruder gets their own (empty) share, so
# these are asked with a body or query naming team A's rows, and the answer must not show them.
COLLECTIONS = {
    "api/v1/auth/tokens/": {},
    "api/v1/me/": {},
    "api/v1/workspaces/": {},
    "api/v1/agents/": {},
    "api/v1/agent/me/": {},
    "api/v1/tasks/": {"workspace": "workspace_id", "agent": "agent_id", "instructions": "x"},
    "api/v1/memory/": {"workspace": "workspace_id", "agent": "agent_id", "content": "x"},
    "api/v1/skills/": {"agent": "agent_id", "skillMd": SKILL_MD},
    "api/v1/marketplace/skills/": {},
    "api/v1/directory/agents/": {},
    "api/v1/loops/": {"workspace": "workspace_id", "agent": "agent_id", "goal": "x"},
    "api/v1/reminders/": {
        "workspace": "workspace_id",
        "agent": "agent_id",
        "text": "x",
        "at": "2099-01-01T00:00:00Z",
    },
    "api/v1/routines/": {
        "workspace": "workspace_id",
        "agent": "agent_id",
        "name": "x",
        "instructions": "x",
        "intervalMinutes": 60,
    },
    "api/v1/connections/": {"workspace": "workspace_id", "provider": "google"},
    "api/v1/conversations/": {
        "workspace": "workspace_id",
        "kind": "channel",
        "title": "x",
        "participants": [{"type": "agent", "id": "agent_id"}],
    },
    "api/v1/card-templates/": {},
    "app/messages/": {"conversation": "conversation_id"},
}
# Bodies for a few routes with ids, so that validation passes and the access check answers.
BODIES = {
    **COLLECTIONS,
    "api/v1/workspaces/<uuid:workspace_id>/members/<uuid:user_id>/": {"role": "admin"},
}

API_INTRUDERS = [
    "outsider",
    "other_member",
    "other_member_own_workspace",
    "foreign_agent",
    "revoked_token",
    "expired_session",
    "host_token",
    "anonymous",
]
PAGE_INTRUDERS = ["outsider", "other_member", "other_member_own_workspace", "anonymous"]
SIGNED_IN = {"outsider", "other_member", "other_member_own_workspace", "foreign_agent"}


def walk(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), pattern.callback


def endpoints() -> dict:
    return {
        route: callback
        for route, callback in walk(get_resolver().url_patterns)
        if not route.startswith("admin/")
    }


def methods(callback) -> list[str]:
    view = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    if view is None:
        return ["get", "post"]  # a page: a function view
    return [m for m in ("get", "post", "put", "patch", "delete") if hasattr(view, m)]


ROUTES = endpoints()
CASES = [
    (route, method)
    for route, callback in sorted(ROUTES.items())
    if route not in EXEMPT
    for method in methods(callback)
]


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker):
    yield from built_once(django_db_blocker, build_world)


@pytest.fixture(scope="module")
def checksum_sql(world, django_db_blocker):
    with django_db_blocker.unblock():
        return tables_checksum_sql()


def fill(route: str, ids: dict) -> str:
    def one(match):
        name = match[2]
        return str(ids[name]) if name in ids else str(uuid.uuid4())

    return "/" + re.sub(r"<(\w+:)?(\w+)>", one, route)


def body_for(route: str, ids: dict) -> dict:
    def value(v):
        if isinstance(v, list):
            return [value(x) for x in v]
        if isinstance(v, dict):
            return {k: value(x) for k, x in v.items()}
        return str(ids[v]) if v in ids else v

    return value(BODIES.get(route, {}))


def client_as(world, who: str) -> Client:
    if who == "anonymous":
        return Client()
    secret = world.secrets["other_member" if who == "other_member_own_workspace" else who]
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


def page_client(world, who: str) -> Client:
    client = Client()
    person = {"outsider": world.dora, "other_member": world.charlie}.get(who)
    if who == "other_member_own_workspace":
        person = world.charlie
    if person is not None:
        client.force_login(person)
    return client


def victim_strings(world) -> list[str]:
    return [str(v) for k, v in world.ids.items() if k.endswith("_id")] + [
        "The launch date is secret.",
        "sk-victim",
    ]


def ask(client, method, url, data):
    send = getattr(client, method)
    if method == "get":
        return send(url, data)
    return send(url, data, content_type="application/json")


# Path parameters asked with ids that name nothing: a Telegram link needs a bot checked with
# Telegram (tests/integrations/test_telegram.py covers its 404s), a directory listing is public
# once published (its refusals: tests/work/test_directory.py).
NO_REAL_ROW = {"link_id", "listing_id"}


def test_every_path_parameter_names_a_real_row_of_team_a(world):
    """A new kind of id in a path gets a real row in tests/security/world.py, or a reason here."""
    names = {m[2] for route in ROUTES for m in re.finditer(r"<(\w+:)?(\w+)>", route)}
    names -= {name for route in EXEMPT for name in re.findall(r"<(?:\w+:)?(\w+)>", route)}
    assert names - NO_REAL_ROW - set(world.ids) == set()


def test_every_endpoint_is_in_the_matrix():
    """A new endpoint is exempt on purpose or asked; the OpenAPI schema agrees with the routes."""
    assert len(CASES) > 150
    for route in EXEMPT:
        assert route in ROUTES, f"exempt {route!r} is no longer a route: take it off the list"
    for route in COLLECTIONS:
        assert route in ROUTES, route
    schema = SchemaGenerator().get_schema(request=None, public=True)
    # Parameter names are camelCase in the schema: compare the shapes.
    routes = {re.sub(r"<(\w+:)?(\w+)>", "{}", "/" + r) for r in ROUTES}
    missing = [p for p in schema["paths"] if re.sub(r"\{\w+\}", "{}", p) not in routes]
    assert not missing, f"in the schema, not in the resolver: {missing}"


def random_ids(ids: dict, keep: tuple = ()) -> dict:
    return {k: (v if k in keep or not k.endswith("_id") else uuid.uuid4()) for k, v in ids.items()}


def expected(who: str, route: str, method: str) -> set[int]:
    if who not in SIGNED_IN:
        return {405, 302} if not route.startswith("api/") else {401}  # 302: to sign in
    if "<" in route:
        return {404, 405}
    if not COLLECTIONS.get(route) or method == "get":
        # Their own share of a collection (checked for Alice's rows below), or a body of theirs.
        return {200, 201, 302, 400, 404, 405}
    return {404, 405}


@pytest.mark.parametrize("route, method", CASES)
def test_no_intruder_reaches_alices_rows(world, checksum_sql, route, method):
    is_page = not route.startswith("api/")
    failures = []
    for who in PAGE_INTRUDERS if is_page else API_INTRUDERS:
        ids = dict(world.ids)
        if who == "other_member_own_workspace":
            if "workspace_id" not in route or route.count("<") < 2:
                continue  # his own workspace, and nothing of Alice's in the path
            ids["workspace_id"] = world.team_b.id
        client = page_client(world, who) if is_page else client_as(world, who)
        before = checksum(checksum_sql)
        response = ask(client, method, fill(route, ids), body_for(route, ids))
        diff = changed(before, checksum(checksum_sql))
        # Alice's ids answer exactly as ids that name nothing: no oracle of what exists.
        keep = ("workspace_id",) if who == "other_member_own_workspace" else ()
        nothing = random_ids(ids, keep)
        control = ask(client, method, fill(route, nothing), body_for(route, nothing))
        status, text = response.status_code, response.content.decode(errors="replace")
        allowed = expected(who, route, method)
        if who == "foreign_agent" and status == 403:
            allowed = allowed | {403}  # people-only endpoints refuse agents, whatever the id
        leaked = [s for s in victim_strings(world) if s in text]
        if status == 302:
            leaked += [] if "/login/" in response["Location"] or who in SIGNED_IN else ["302"]
        # (A page's body carries a fresh CSRF token and nonce each time: its status is compared.)
        same = (status, is_page or text) == (
            control.status_code,
            is_page or control.content.decode(errors="replace"),
        )
        if status not in allowed or diff or leaked or ("<" in route and not same):
            failures.append((who, method.upper(), route, status, text[:160], diff, leaked, same))
    assert not failures, "\n".join(map(str, failures))
