"""What `make run` serves a newcomer: DEBUG off unless asked for, the product's own 404 and 500
pages (never Django's debug pages with their URL listings), and static files all the same."""

import json
import os
import subprocess
import sys
import uuid
from urllib.error import HTTPError
from urllib.request import urlopen

import pytest

from tests.socket_helpers import free_port
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db


def settings_started_with(env: dict) -> dict:
    """The settings a process gets from ENV (on top of this one's, DEBUG and hosts unset)."""
    base = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "ALLOWED_HOSTS", "HTTPS")}
    code = (
        "import json; from agntchat import settings as s; print(json.dumps({'debug': s.DEBUG,"
        " 'https': s.HTTPS, 'secure_cookies': getattr(s, 'SESSION_COOKIE_SECURE', False)}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=base | env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


@pytest.mark.parametrize(
    ("env", "debug"), [({}, False), ({"DEBUG": "0"}, False), ({"DEBUG": "1"}, True)]
)
def test_debug_is_off_unless_asked_for(env, debug):
    assert settings_started_with(env)["debug"] is debug


@pytest.mark.parametrize(
    ("env", "https"),
    [
        ({}, False),  # make run, tests: only local names
        ({"ALLOWED_HOSTS": "chat.example.com"}, True),
        ({"ALLOWED_HOSTS": "chat.example.com", "HTTPS": "0"}, False),
    ],
)
def test_https_hardening_follows_the_names_the_site_answers_to(env, https):
    started = settings_started_with(env)
    assert started["https"] is https and started["secure_cookies"] is https


@pytest.fixture(scope="module")
def make_run_server():
    """daphne as `make run` starts it (the Procfile's web process), DEBUG not set."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "ALLOWED_HOSTS", "HTTPS")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
        + ["agntchat.asgi:application"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def serving() -> bool:
        assert proc.poll() is None, "daphne exited"
        try:
            urlopen(f"{url}/static/app.css", timeout=1).close()
            return True
        except OSError:
            return False

    try:
        wait_until(serving, timeout=30, what="daphne serving")
        yield url
    finally:  # not serving, the run interrupted, or done
        proc.terminate()
        proc.wait(timeout=10)


def fetch(url: str) -> tuple[int, str, str]:
    try:
        with urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


@pytest.mark.slow
def test_make_run_serves_static_files_and_our_404_without_debug(make_run_server):
    for path, content_type in [("/static/app.css", "text/css"), ("/static/app.js", "javascript")]:
        status, served_as, _ = fetch(make_run_server + path)
        assert status == 200 and content_type in served_as, path
    status, served_as, login = fetch(make_run_server + "/login/")
    assert status == 200 and "/static/app.css" in login and "/static/app.js" in login
    status, served_as, page = fetch(make_run_server + "/no/such/page/")
    assert status == 404 and served_as.startswith("text/html")
    assert "Nothing here" in page
    assert "URLconf" not in page and "api/v1/" not in page  # no list of URL patterns


def test_unknown_pages_are_our_404(alice, team_a, client):
    client.force_login(alice)
    for url in ["/no/such/page/", f"/w/{team_a.id}/c/{uuid.uuid4()}/"]:
        response = client.get(url)
        assert response.status_code == 404, url
        assert "404.html" in [template.name for template in response.templates]
        assert "Nothing here" in response.content.decode()


@pytest.mark.urls("tests.error_urls")
def test_a_page_that_fails_is_our_500_page(alice, client):
    client.raise_request_exception = False
    client.force_login(alice)
    response = client.get("/broken/")
    assert response.status_code == 500
    assert "500.html" in [template.name for template in response.templates]
    page = response.content.decode()
    assert "Something went wrong" in page and "/static/app.css" in page
    assert "RuntimeError" not in page  # no traceback
