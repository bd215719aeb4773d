"""The browser socket's origin check: same scheme, host and port as the page, or a trusted origin.

Django's CSRF check guards forms this way; a WebSocket handshake carries the session cookie
without it, so /ws/live/ checks the Origin header itself. Channels' AllowedHostsOriginValidator
compares host names only: a page on another port of the same host (another app, anyone's dev
server) could open the socket with the person's cookie and read their live events.
"""

from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import is_same_domain, split_domain_port, validate_host

from agntchat.core.sockets import header

DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_parts(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) origin, the port made explicit; None if it is not one."""
    try:
        parts = urlsplit(url.strip().lower())
        port = parts.port
    except ValueError:  # a port out of range or not a number
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme]


def socket_scheme(scope) -> str:
    """http or https, as Django's request.is_secure() would decide for this connection."""
    proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy_header:
        name, secure_value = proxy_header
        # HTTP_X_FORWARDED_PROTO → x-forwarded-proto
        forwarded = header(scope, name.removeprefix("HTTP_").replace("_", "-").lower().encode())
        if forwarded:
            return "https" if forwarded.split(",")[0].strip() == secure_value else "http"
    return "https" if scope.get("scheme") in ("wss", "https") else "http"


def origin_allowed(scope) -> bool:
    """Whether a WebSocket handshake comes from a page of this site (or a trusted origin).

    The Host header must name an allowed host, and the Origin must equal the page's own
    origin, scheme://host:port, or match one of CSRF_TRUSTED_ORIGINS. A missing Origin is
    refused: every browser sends one, and only browsers carry the session cookie."""
    host = header(scope, b"host").strip().lower()
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    origin = origin_parts(header(scope, b"origin"))
    if origin is None:
        return False
    if origin == origin_parts(f"{socket_scheme(scope)}://{host}"):
        return True
    return any(trusted_match(origin, trusted) for trusted in settings.CSRF_TRUSTED_ORIGINS)


def trusted_match(origin: tuple[str, str, int], trusted: str) -> bool:
    """As Django's CSRF check reads CSRF_TRUSTED_ORIGINS: exact, or "https://*.example.com"
    for every subdomain; the scheme and port must match either way."""
    wildcard = "://*." in trusted
    pattern = origin_parts(trusted.replace("://*.", "://", 1) if wildcard else trusted)
    if pattern is None or pattern[0] != origin[0] or pattern[2] != origin[2]:
        return False
    if wildcard:
        return is_same_domain(origin[1], "." + pattern[1])
    return origin[1] == pattern[1]
