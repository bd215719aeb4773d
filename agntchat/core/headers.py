"""Security headers on every HTTP answer, pages and API alike (Django's SecurityMiddleware sets
X-Content-Type-Options, Referrer-Policy and Cross-Origin-Opener-Policy from settings; this adds
the Content-Security-Policy and the Permissions-Policy). It also keeps the client's address
at hand for the audit log (current_client_address).

The pages load only the site's own script and styles (static/app.js, app.css, cards.css): no
inline script, no inline <style>. Style attributes stay allowed (style-src-attr): a rendered
artifact or a markdown table keeps its sanitised styles (artifacts/rendering.py lets no url()
through); none of the site's own templates uses one. Images may come from other https sites
(a card's pictures, files in an S3 bucket). The browser socket connects to this same origin.
"""

from contextvars import ContextVar

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.utils.decorators import sync_and_async_middleware


def content_security_policy(request) -> str:
    socket = f"{'wss' if request.is_secure() else 'ws'}://{request.get_host()}"
    images = "'self' data: blob: https:" + ("" if settings.HTTPS else " http:")
    return "; ".join(
        (
            "default-src 'self'",
            "script-src 'self'",
            "style-src 'self'",
            "style-src-attr 'unsafe-inline'",
            f"img-src {images}",
            "media-src 'self' blob: https:",
            f"connect-src 'self' {socket}",
            "font-src 'self'",
            "frame-src 'self'",
            "frame-ancestors 'none'",
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'self'",
        )
    )


# Nothing the pages need (copying to the clipboard is allowed by default for the page itself).
PERMISSIONS_POLICY = ", ".join(
    f"{feature}=()"
    for feature in (
        "accelerometer",
        "autoplay",
        "camera",
        "display-capture",
        "geolocation",
        "gyroscope",
        "magnetometer",
        "microphone",
        "midi",
        "payment",
        "usb",
    )
)


# The address of the client whose request is being served, for the audit log (None outside one).
_client_address: ContextVar[str | None] = ContextVar("client_address", default=None)


def current_client_address() -> str | None:
    return _client_address.get()


def add_headers(request, response):
    try:
        policy = content_security_policy(request)
    except DisallowedHost:  # answered 400 already; no socket to name
        policy = "default-src 'none'; frame-ancestors 'none'"
    response.headers.setdefault("Content-Security-Policy", policy)
    response.headers.setdefault("Permissions-Policy", PERMISSIONS_POLICY)
    if signed_in(request):
        # A person's pages and data are kept by no cache, the browser's own included: after
        # logging out, Back shows nothing of them.
        response.headers.setdefault("Cache-Control", "no-store")
    return response


def signed_in(request) -> bool:
    """Whether the request came with a session cookie or credentials (not checked here: a cheap
    test, with no database read)."""
    return settings.SESSION_COOKIE_NAME in request.COOKIES or "HTTP_AUTHORIZATION" in request.META


@sync_and_async_middleware
def security_headers(get_response):
    """Both kinds, so that under ASGI the chain stays async (no thread hop for this)."""
    if iscoroutinefunction(get_response):

        async def middleware(request):
            _client_address.set(request.META.get("REMOTE_ADDR") or None)
            return add_headers(request, await get_response(request))

    else:

        def middleware(request):
            _client_address.set(request.META.get("REMOTE_ADDR") or None)
            return add_headers(request, get_response(request))

    return middleware
