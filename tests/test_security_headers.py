"""Security headers on pages and on the API: a CSP that allows only the site's own script and
styles and its own socket, no framing, no plugins; the browser features the pages never use off."""

import pytest
from django.test import Client, override_settings

from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def directives(response) -> dict[str, str]:
    policy = response["Content-Security-Policy"]
    return dict(
        (part.strip().split(" ", 1) + [""])[:2] for part in policy.split(";") if part.strip()
    )


def assert_secure_headers(response, socket="ws://testserver"):
    csp = directives(response)
    assert csp["script-src"] == "'self'"
    assert csp["style-src"] == "'self'"
    assert csp["object-src"] == "'none'"
    assert csp["frame-ancestors"] == "'none'"
    assert csp["base-uri"] == "'none'"
    assert csp["connect-src"] == f"'self' {socket}"
    assert (
        "unsafe-inline" not in csp["script-src"]
        and "unsafe-eval" not in response["Content-Security-Policy"]
    )
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"
    assert response["X-Frame-Options"] == "DENY"
    assert "camera=()" in response["Permissions-Policy"]
    assert "microphone=()" in response["Permissions-Policy"]


def test_pages_carry_the_headers(alice):
    client = Client()
    assert_secure_headers(client.get("/login/"))
    client.force_login(alice)
    page = client.get("/", follow=True)
    assert page.status_code == 200
    assert_secure_headers(page)
    # A signed-in person's page is kept by no cache: after logging out, Back shows nothing.
    assert "no-store" in page["Cache-Control"]


def test_what_a_person_reads_is_not_stored_and_what_anyone_reads_may_be(alice):
    assert client_for(alice).get("/api/v1/workspaces/")["Cache-Control"] == "no-store"
    assert "Cache-Control" not in Client().get("/nowhere/")  # no session, no credentials


def test_the_api_and_its_errors_carry_them(alice):
    assert_secure_headers(client_for(alice).get("/api/v1/workspaces/"))
    assert_secure_headers(Client().get("/api/v1/workspaces/"))  # 401
    assert_secure_headers(Client().get("/nowhere/"))  # 404


@override_settings(SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"))
def test_over_https_the_socket_is_wss():
    response = Client().get("/login/", HTTP_X_FORWARDED_PROTO="https", HTTP_HOST="testserver")
    assert directives(response)["connect-src"] == "'self' wss://testserver"


def test_no_template_has_inline_script_or_style():
    """What the CSP refuses: inline <script>, <style>, style="…" and on…="…" handlers."""
    import re
    from pathlib import Path

    from django.conf import settings

    inline = re.compile(
        r"<script(?![^>]*\bsrc=)[^>]*>|<style\b|\sstyle=|\son[a-z]+=[\"']|javascript:", re.I
    )
    found = [
        f"{path.relative_to(settings.BASE_DIR)}: {match.group(0)}"
        for path in Path(settings.BASE_DIR, "templates").rglob("*.html")
        for match in inline.finditer(path.read_text())
    ]
    assert found == []
