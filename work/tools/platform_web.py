"""The web_fetch tool: a web page as clean readable text, within limits of size, time and
redirects, and never from the server's own network unless the operator allows it.

Every hop (the first URL and each redirect) is checked before it is requested: http or https,
a host whose every address is public, and the connection goes to the address that was checked
(with the name kept for the Host header and TLS), so a name cannot resolve to a public address
for the check and a private one for the request.
"""

import ipaddress
import re
import socket
import threading
import time
import zlib
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx
from django.conf import settings

from agntchat.core.exceptions import AppError
from work.models import Risk
from work.tools.registry import ToolContext, tool

MAX_BYTES = 2 * 1024 * 1024  # read at most this much of a response
MAX_CHARS = 20_000  # and return at most this much text
MAX_REDIRECTS = 5
FETCH_SECONDS = 20.0  # the whole fetch, every hop included
USER_AGENT = "agntchat-web-fetch/1 (+https://github.com/agntchat)"
HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("text/", "application/json", "application/xml", "+json", "+xml")


class FetchRefused(AppError):
    code = "web_fetch_refused"


class FetchFailed(AppError):
    code = "web_fetch_failed"


def refused_address(address: str) -> bool:
    """True for addresses of the server's own networks: private, loopback, link-local,
    site-local, multicast, reserved, unspecified. An IPv6 address carrying an IPv4 one (mapped,
    6to4, Teredo) counts as that one too: 2002:7f00:1:: is 127.0.0.1 on a 6to4 host."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if ip.version == 6:
        if ip.is_site_local:
            return True
        carried = ip.ipv4_mapped or ip.sixtofour or (ip.teredo and ip.teredo[1])
        if carried is not None and refused_address(str(carried)):
            return True
    return (
        not ip.is_global
        or ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
    )


def resolve(host: str, port: int) -> list[str]:
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise FetchFailed(f"The host {host!r} could not be resolved.") from None
    return list(dict.fromkeys(info[4][0] for info in found))


def checked_target(url: str) -> tuple[str, str, str]:
    """(URL to connect to, with the checked address; Host header; TLS server name) for URL, or
    FetchRefused saying why it may not be fetched."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise FetchRefused(f"{url!r} is not a valid URL.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchRefused(f"Only http and https URLs with a host can be fetched, not {url!r}.")
    try:
        # The Host header and TLS take a name in its ASCII form: xn--bcher-kva.example.
        host = parts.hostname.encode("idna").decode("ascii")
    except UnicodeError:
        raise FetchRefused(f"{url!r} is not a valid URL.") from None
    addresses = resolve(host, port)
    if not settings.WEB_FETCH_ALLOW_PRIVATE:
        private = [a for a in addresses if refused_address(a)]
        if private:
            raise FetchRefused(
                f"{host} resolves to a private or reserved address ({private[0]}); pages on "
                "the server's own network cannot be fetched."
            )
    address = addresses[0].split("%", 1)[0]
    netloc = f"[{address}]" if ":" in address else address
    if parts.port:
        netloc += f":{parts.port}"
    path = parts.path or "/"
    pinned = urlunsplit((parts.scheme, netloc, path, parts.query, ""))
    # The Host header: the name (or address) and port the URL gives, without any userinfo.
    host_header = f"[{host}]" if ":" in host else host
    if parts.port:
        host_header += f":{parts.port}"
    return pinned, host_header, host


# A "<" that opens nothing closed before the next "<"; comments' and declarations' markup.
UNCLOSED_LT = re.compile(r"<(?![^<>]*>)")
DECLARATION = re.compile(r"<[!?][^<>]*>")


def parseable(html: str) -> str:
    """HTML with the same text, that HTMLParser reads in linear time: comments (an unclosed one
    runs to the end, as in a browser), declarations and processing instructions dropped, and
    each "<" that opens nothing written as text. Left in, HTMLParser scans to the end of the
    page from each of them: quadratic, most of an hour for 2 MB. No step here scans past the
    next "<" or ">", or the comment's end."""
    kept, at = [], 0
    while (start := html.find("<!--", at)) >= 0:
        kept.append(html[at:start])
        end = html.find("-->", start + 4)
        at = len(html) if end < 0 else end + 3
    kept.append(html[at:])
    return UNCLOSED_LT.sub("&lt;", DECLARATION.sub("", "".join(kept)))


class TextOfPage(HTMLParser):
    """The readable text of an HTML page, and its title; scripts, styles and markup dropped.
    What is fed is read at close(), whole, made ``parseable`` first."""

    SKIPPED = {"script", "style", "noscript", "template", "svg", "head", "iframe", "object"}
    BLOCKS = {
        "p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "header",
        "footer", "main", "nav", "aside", "blockquote", "pre", "hr", "dd", "dt", "form",
        "h1", "h2", "h3", "h4", "h5", "h6",
    }  # fmt: skip

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title_parts: list[str] = []
        self.skipping: list[str] = []
        self.in_title = False
        self.fed: list[str] = []

    def feed(self, data):
        self.fed.append(data)

    def close(self):
        super().feed(parseable("".join(self.fed)))
        super().close()

    def handle_starttag(self, tag, attrs):
        if tag == "title":
            self.in_title = True
        elif tag in self.SKIPPED:
            self.skipping.append(tag)
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_startendtag(self, tag, attrs):
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag == "title":
            self.in_title = False
        elif tag in self.SKIPPED:
            if tag in self.skipping:
                while self.skipping and self.skipping.pop() != tag:
                    pass
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data):
        if self.in_title:
            self.title_parts.append(data)
        elif not self.skipping:
            self.parts.append(data)

    @property
    def title(self) -> str:
        return " ".join("".join(self.title_parts).split())

    @property
    def text(self) -> str:
        return tidy("".join(self.parts))


def tidy(text: str) -> str:
    """Runs of spaces to one, blank lines to one, each line trimmed."""
    lines = (" ".join(line.split()) for line in text.splitlines())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def inflater(response: httpx.Response):
    """What undoes the response's content encoding (None: nothing to undo), or FetchRefused.
    One layer of gzip or deflate only: each layer can inflate a thousandfold."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip", "deflate"):
        return zlib.decompressobj(zlib.MAX_WBITS | 32)  # a gzip or zlib header, told apart
    raise FetchRefused(f"The page is encoded as {encoding!r}, which this tool cannot read.")


def read_body(response: httpx.Response, deadline: float, max_bytes: int) -> tuple[bytes, bool]:
    """Up to MAX_BYTES of the body, decoded (and whether there was more), before DEADLINE. It is
    inflated here, never past what is kept: httpx would inflate each whole chunk it reads, and
    a few kilobytes of gzip are megabytes of text."""
    inflate = inflater(response)
    body = bytearray()
    for chunk in response.iter_raw():
        if inflate is not None:
            try:
                chunk = inflate.decompress(chunk, max_bytes + 1 - len(body))
            except zlib.error:
                raise FetchFailed("The page's compressed body is damaged.") from None
        body += chunk
        if len(body) > max_bytes:
            return bytes(body[:max_bytes]), True
        if time.monotonic() > deadline:
            raise _too_slow()
    return bytes(body), False


def _too_slow() -> "FetchFailed":
    return FetchFailed(f"The page took longer than {FETCH_SECONDS:g} seconds to fetch.")


def content_type(response: httpx.Response) -> str:
    return response.headers.get("content-type", "text/html").split(";")[0].strip().lower()


def decoded(response: httpx.Response, body: bytes) -> str:
    """BODY as text, in the charset the response names (UTF-8 when it names none we can use)."""
    try:
        return body.decode(response.charset_encoding or "utf-8", errors="replace")
    except (LookupError, UnicodeError):  # no such codec, or one that is not for text
        return body.decode("utf-8", errors="replace")


def page_text(response: httpx.Response, body: bytes) -> tuple[str, str]:
    """(title, text) of a response, or FetchRefused when it is not text."""
    kind = content_type(response)
    text = decoded(response, body)
    if kind in HTML_TYPES:
        parser = TextOfPage()
        parser.feed(text)
        parser.close()
        return parser.title, parser.text
    if kind.startswith(TEXT_TYPES[0]) or any(t in kind for t in TEXT_TYPES[1:]):
        return "", text.strip()
    raise FetchRefused(f"The page is not text (its content type is {kind}); nothing to read.")


class CutOff:
    """Shuts a request's connections at its deadline. httpx's timeouts are per read: a server
    sending its headers a byte at a time would otherwise hold the call, its worker and its
    transaction for as long as it likes. Its ``trace`` hook (an httpcore extension) keeps a
    duplicate of each connection's socket as it is made: TLS wraps the socket in a new one and
    detaches the first, which would then shut nothing (a handshake sent a byte at a time). Call
    ``close`` when the request is over."""

    def __init__(self, seconds: float):
        self.sockets: list[socket.socket] = []
        self.timer = threading.Timer(seconds, self.cut)
        self.timer.daemon = True

    def trace(self, event: str, info: dict) -> None:
        if event == "connection.connect_tcp.complete":
            self.sockets.append(info["return_value"].get_extra_info("socket").dup())

    def cut(self) -> None:
        for sock in self.sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # the blocked read returns at once
            except OSError:
                pass

    def close(self) -> None:
        self.timer.cancel()
        for sock in self.sockets:
            sock.close()


def fetch(url: str, read, *, accept: str, max_bytes: int = MAX_BYTES):
    """READ(url, response, body, cut) of the response at URL, every hop checked (module
    docstring); at most MAX_BYTES of the body are read (CUT: there was more)."""
    deadline = time.monotonic() + FETCH_SECONDS
    cut_off = CutOff(FETCH_SECONDS)
    cut_off.timer.start()
    try:
        return _fetch(url, read, accept, max_bytes, deadline, cut_off)
    finally:
        cut_off.close()


def _fetch(url: str, read, accept: str, max_bytes: int, deadline: float, cut_off: CutOff):
    # trust_env off: no proxy from the environment sees (or bypasses) the checks.
    with httpx.Client(follow_redirects=False, trust_env=False) as client:
        for _hop in range(MAX_REDIRECTS + 1):
            pinned, host_header, server_name = checked_target(url)
            # Each hop within what is left of the whole fetch's time, not 10 seconds afresh.
            left = deadline - time.monotonic()
            if left <= 0:
                raise _too_slow()
            request = client.build_request(
                "GET",
                pinned,
                headers={
                    "Host": host_header,
                    "User-Agent": USER_AGENT,
                    "Accept": accept,
                    "Accept-Encoding": "gzip, deflate",  # what ``inflater`` undoes
                },
                extensions={"sni_hostname": server_name, "trace": cut_off.trace},
                timeout=httpx.Timeout(min(10.0, left), connect=min(5.0, left)),
            )
            try:
                response = client.send(request, stream=True)
                try:
                    location = response.headers.get("location")
                    if response.is_redirect and location:
                        url = urljoin(url, location)
                        continue
                    body, cut = read_body(response, deadline, max_bytes)
                    return read(url, response, body, cut)
                finally:
                    response.close()
            except httpx.HTTPError as exc:
                if time.monotonic() >= deadline:  # a timeout, or cut off (CutOff)
                    raise _too_slow() from None
                if isinstance(exc, httpx.TimeoutException):
                    raise FetchFailed("The server did not answer in time.") from None
                raise FetchFailed(f"The page could not be fetched: {exc}.") from None
    raise FetchRefused(f"The page redirected more than {MAX_REDIRECTS} times; stopped.")


def _page(url: str, response: httpx.Response, body: bytes, cut: bool) -> dict:
    title, text = page_text(response, body)
    if len(text) > MAX_CHARS:
        text, cut = text[:MAX_CHARS], True
    page = {"url": url, "status": response.status_code, "title": title, "text": text}
    page["truncated"] = cut
    if cut:
        page["note"] = (
            f"The page was longer than this tool returns ({MAX_CHARS} characters of "
            f"text from at most {MAX_BYTES // (1024 * 1024)} MB); the rest is cut off."
        )
    return page


def fetch_page(url: str) -> dict:
    return fetch(url, _page, accept="text/html,text/plain;q=0.9,*/*;q=0.5")


@tool(
    "web_fetch",
    description=(
        "Fetch a web page (http or https) and read it as plain text: its title, then its "
        f"readable text without scripts, styles or markup, at most {MAX_CHARS} characters "
        "(says when it was cut). Redirects are followed up to 5 times. Pages on private or "
        "local networks are refused. Use it to read a page someone linked or you need to cite."
    ),
    risk=Risk.EXTERNAL,
    timeout_seconds=FETCH_SECONDS + 5,
    input_schema={
        "type": "object",
        "properties": {
            "url": {
                "type": "string",
                "minLength": 1,
                "maxLength": 2048,
                "pattern": "^[hH][tT][tT][pP][sS]?://",
                "description": "The page's http or https URL.",
            }
        },
        "required": ["url"],
        "additionalProperties": False,
    },
)
def web_fetch(context: ToolContext, arguments: dict):
    return fetch_page(arguments["url"])
