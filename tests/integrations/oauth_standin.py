"""A local stand-in OAuth 2.0 authorization server, speaking the real wire format: the authorize
redirect (with state and a PKCE S256 challenge), the token endpoint (authorization_code and
refresh_token grants, client authentication by HTTP Basic), RFC 7009 revocation (Google's
style) and GitHub's DELETE /applications/{client_id}/grant, the account endpoint, and one API
path (``/api/ping``) that answers 200 to a live access token and 401 to anything else.

It checks what a real server checks (the client's secret, the redirect URI, the verifier
against the challenge, one use per code) and records every token request, so a test can count
refreshes."""

import base64
import hashlib
import json
import secrets
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlparse

CLIENT_ID, CLIENT_SECRET = "standin-client", "standin-secret"


class AuthServer:
    def __init__(self, account="alice@example.com", rotate_refresh=False, expires_in=3600):
        self.account = account
        self.rotate_refresh = rotate_refresh
        self.expires_in = expires_in
        self.codes: dict[str, dict] = {}  # code → {challenge, redirect_uri, scope}
        self.access: set[str] = set()
        self.refresh: set[str] = set()
        self.token_requests: list[dict] = []
        self.revoked: list[str] = []
        self.lock = threading.Lock()
        self.slow_refresh = 0.0  # seconds a refresh takes (to make callers overlap)
        self.outage = None  # (status, raw body): what the token endpoint answers while down
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    def provider_settings(self, github=False) -> dict:
        """OAUTH_PROVIDERS' entry pointing at this server."""
        return {
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
            "authorize_url": f"{self.url}/authorize",
            "token_url": f"{self.url}/token",
            "revoke_url": (
                f"{self.url}/applications/{{client_id}}/grant" if github else f"{self.url}/revoke"
            ),
            "account_url": f"{self.url}/userinfo",
            "scopes": ["repo"] if github else ["openid", "email"],
            "authorize_params": {} if github else {"access_type": "offline"},
        }

    def issue(self) -> dict:
        access, refresh = "at-" + secrets.token_hex(8), "rt-" + secrets.token_hex(8)
        self.access.add(access)
        self.refresh.add(refresh)
        return {"access": access, "refresh": refresh}

    def revoke_all(self):
        """The person revoked the app at the provider: no token of it works any more."""
        with self.lock:
            self.access.clear()
            self.refresh.clear()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, body=None, headers=None):
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                if body is not None:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _bearer(self) -> str:
                value = self.headers.get("Authorization", "")
                return value[7:] if value.startswith("Bearer ") else ""

            def _client_ok(self, form) -> bool:
                basic = self.headers.get("Authorization", "")
                if basic.startswith("Basic "):
                    who = base64.b64decode(basic[6:]).decode()
                    return who == f"{CLIENT_ID}:{CLIENT_SECRET}"
                return (form.get("client_id"), form.get("client_secret")) == (
                    CLIENT_ID,
                    CLIENT_SECRET,
                )

            def do_GET(self):
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path == "/authorize":
                    # A real server shows its consent screen; the stand-in says yes at once.
                    if (
                        query.get("client_id") != CLIENT_ID
                        or query.get("code_challenge_method") != "S256"
                    ):
                        return self._send(400, {"error": "invalid_request"})
                    code = "code-" + secrets.token_hex(8)
                    server.codes[code] = {
                        "challenge": query["code_challenge"],
                        "redirect_uri": query["redirect_uri"],
                        "scope": query.get("scope", ""),
                    }
                    back = urlencode({"code": code, "state": query["state"]})
                    return self._send(302, headers={"Location": f"{query['redirect_uri']}?{back}"})
                if url.path == "/userinfo":
                    if self._bearer() not in server.access:
                        return self._send(401, {"error": "invalid_token"})
                    return self._send(200, {"email": server.account, "login": server.account})
                if url.path == "/api/ping":
                    if self._bearer() not in server.access:
                        return self._send(401, {"message": "Bad credentials"})
                    return self._send(200, {"ok": True, "token": self._bearer()})
                return self._send(404, {"error": "not_found"})

            def _form(self) -> dict:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode()
                if self.headers.get("Content-Type", "").startswith("application/json"):
                    return json.loads(raw or "{}")
                return {k: v[0] for k, v in parse_qs(raw).items()}

            def do_POST(self):
                form = self._form()
                if self.path == "/token":
                    return self._token(form)
                if self.path == "/revoke":
                    with server.lock:
                        server.revoked.append(form.get("token", ""))
                        server.access.discard(form.get("token", ""))
                    return self._send(200, {})
                return self._send(404, {"error": "not_found"})

            def do_DELETE(self):
                form = self._form()
                if self.path == f"/applications/{CLIENT_ID}/grant" and self._client_ok({}):
                    server.revoked.append(form.get("access_token", ""))
                    server.revoke_all()
                    return self._send(204)
                return self._send(404, {"message": "Not Found"})

            def _token(self, form):
                with server.lock:
                    server.token_requests.append(form)
                if server.outage is not None:
                    status, raw = server.outage
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    return self.wfile.write(raw)
                if not self._client_ok(form):
                    return self._send(401, {"error": "invalid_client"})
                grant = form.get("grant_type")
                if grant == "authorization_code":
                    found = server.codes.pop(form.get("code", ""), None)
                    verifier = form.get("code_verifier", "")
                    challenge = (
                        base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
                        .rstrip(b"=")
                        .decode()
                    )
                    if (
                        found is None
                        or found["redirect_uri"] != form.get("redirect_uri")
                        or found["challenge"] != challenge
                    ):
                        return self._send(400, {"error": "invalid_grant"})
                    issued = server.issue()
                    return self._send(200, self._token_body(issued, found["scope"]))
                if grant == "refresh_token":
                    time.sleep(server.slow_refresh)
                    with server.lock:
                        old = form.get("refresh_token", "")
                        if old not in server.refresh:
                            return self._send(
                                400,
                                {"error": "invalid_grant", "error_description": "Token revoked"},
                            )
                        issued = server.issue()
                        if server.rotate_refresh:
                            server.refresh.discard(old)
                        else:
                            server.refresh.discard(issued["refresh"])
                            issued["refresh"] = None
                    return self._send(200, self._token_body(issued, ""))
                return self._send(400, {"error": "unsupported_grant_type"})

            def _token_body(self, issued, scope):
                body = {
                    "access_token": issued["access"],
                    "token_type": "Bearer",
                    "expires_in": server.expires_in,
                }
                if issued["refresh"]:
                    body["refresh_token"] = issued["refresh"]
                if scope:
                    body["scope"] = scope
                return body

        return Handler


@contextmanager
def serving(server: AuthServer):
    """SERVER, started, as both providers' (Google's and GitHub's) for the while."""
    from django.test import override_settings

    with server:
        providers = {
            "google": server.provider_settings(),
            "github": server.provider_settings(github=True),
        }
        with override_settings(OAUTH_PROVIDERS=providers):
            yield server
