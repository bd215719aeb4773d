"""Django's HTTP side under daphne, in one hop to a worker thread per request.

Django's ASGI handler runs each hook of each sync middleware in its own hop between the event
loop and the sync thread: two per middleware, about a dozen per request, and together they cost
more than our views do. Every view and middleware of this project is sync and every response is
a complete body, so the whole request (middleware, view, response) runs in one call through
Django's WSGI handler, and the response goes back to the event loop at once.

Requests run side by side on a few threads of their own, each whole request on one thread, as a
threaded WSGI server runs them: on Django's single sync thread they would queue behind each
other's database round trips. What this buys: docs/benchmarks.md.
"""

import functools
import sys
from concurrent.futures import ThreadPoolExecutor
from tempfile import SpooledTemporaryFile

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler

from agntchat.core.api import error_body, json_bytes


def daphne_leaves_bodies_to_django() -> None:
    """Twisted, under daphne, parses each POST's Content-Type with the email package and a form
    or multipart body whole into ``request.args``, on the event loop, before daphne passes the
    raw body on; nothing reads those args. Off: 0.19 ms less per POST here, and a 10 MB upload
    no longer holds every socket of the process still for 0.75 s while it is parsed twice."""
    from daphne.http_protocol import WebRequest

    init = WebRequest.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._parsePOSTFormSubmission = False  # twisted.web.http.Request's own switch

    WebRequest.__init__ = __init__


def largest_body() -> int:
    """The most bytes any request body may have here: a file upload's, with its multipart
    framing (conversations.api.FileUploadView), or a JSON body's, whichever is larger."""
    return max(settings.DATA_UPLOAD_MAX_MEMORY_SIZE, settings.FILE_UPLOAD_MAX_SIZE + 64 * 1024)


def _plain_answer(status: bytes, code: str, message: str) -> bytes:
    """A whole HTTP/1.1 answer in the API's error shape, written straight to the connection
    (before daphne or Django have a request to answer), which is then closed."""
    body = json_bytes(error_body(code, message))
    return (
        b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nConnection: close\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (status, len(body), body)
    )


class _Discarded:
    """Where the rest of a refused body goes while the connection closes."""

    def write(self, data: bytes) -> None:
        pass


def daphne_refuses_large_bodies() -> None:
    """Twisted reads a whole request body (to memory or a temporary file) before daphne passes
    the request on, so Django's size limits only speak once every byte has arrived: a client
    could make each node take in gigabytes. Here a body declared larger than ``largest_body``
    (Content-Length), or growing past it (chunked), is answered 413 at once and the connection
    closed, before the body is read; nothing of it reaches Django."""
    from daphne.http_protocol import WebRequest

    limit = largest_body()
    refusal = _plain_answer(
        b"413 Content Too Large",
        "too_large",
        f"The request body is larger than this server accepts ({limit} bytes at most).",
    )
    got_length, handle_chunk, received = (
        WebRequest.gotLength,
        WebRequest.handleContentChunk,
        WebRequest.requestReceived,
    )

    def refuse(request) -> None:
        request.content = _Discarded()
        request.channel.transport.write(refusal)
        request.channel.loseConnection()  # reads no more of it

    @functools.wraps(got_length)
    def gotLength(self, length):
        self.body_size = 0
        if length is not None and length > limit:
            return refuse(self)
        return got_length(self, length)

    @functools.wraps(handle_chunk)
    def handleContentChunk(self, data):
        self.body_size += len(data)
        if self.body_size > limit and not isinstance(self.content, _Discarded):
            return refuse(self)
        return handle_chunk(self, data)

    @functools.wraps(received)
    def requestReceived(self, command, path, version):
        # The end of a refused body already read with its last chunk: not passed on.
        if not isinstance(self.content, _Discarded):
            return received(self, command, path, version)

    WebRequest.gotLength = gotLength
    WebRequest.handleContentChunk = handleContentChunk
    WebRequest.requestReceived = requestReceived


def daphne_times_out_slow_requests() -> None:
    """Twisted's idle timeout restarts at every byte, so a client sending its request a byte
    at a time holds its connection (and, once the first line is in, a request in daphne) for as
    long as it likes: a few thousand such clients starve a node with no balancer in front. Here
    a request whose headers are not all in HTTP_HEADERS_SECONDS after its first byte is
    answered 408 and closed. A slow body is not cut: an upload over a poor link is legitimate,
    and the size limit bounds it. A connection idle between requests is Twisted's (60 s).

    Twisted's refusals of a malformed request, or of one whose request line and headers pass
    16 KB, were a bare ``400 Bad Request`` with no body; they now say what was wrong (431 for
    the size), in the API's error shape."""
    from twisted.internet import reactor
    from twisted.web.http import HTTPChannel

    deadline = settings.HTTP_HEADERS_SECONDS
    timed_out = _plain_answer(
        b"408 Request Timeout",
        "request_timeout",
        f"The request's headers did not arrive within {deadline} seconds.",
    )
    too_large = _plain_answer(
        b"431 Request Header Fields Too Large",
        "headers_too_large",
        f"The request line and headers pass {HTTPChannel.totalHeadersSize} bytes, "
        f"or number more than {HTTPChannel.maxHeaders} headers.",
    )
    malformed = _plain_answer(b"400 Bad Request", "bad_request", "The request is malformed.")
    made, received, all_headers, done, lost = (
        HTTPChannel.connectionMade,
        HTTPChannel.dataReceived,
        HTTPChannel.allHeadersReceived,
        HTTPChannel.requestDone,
        HTTPChannel.connectionLost,
    )

    def late(channel) -> None:
        channel.headers_timer = None
        channel.transport.write(timed_out)
        channel.loseConnection()

    def stop_timer(channel) -> None:
        if channel.headers_timer is not None:
            channel.headers_timer.cancel()
            channel.headers_timer = None

    @functools.wraps(made)
    def connectionMade(self):
        self.headers_timer, self.awaiting_request = None, True
        made(self)

    @functools.wraps(received)
    def dataReceived(self, data):
        if self.awaiting_request:  # the first byte of a request
            self.awaiting_request = False
            self.headers_timer = reactor.callLater(deadline, late, self)
        received(self, data)

    @functools.wraps(all_headers)
    def allHeadersReceived(self):
        stop_timer(self)
        all_headers(self)

    @functools.wraps(done)
    def requestDone(self, request):
        # Before Twisted's own, which goes on with what the client sent next (pipelining).
        self.awaiting_request = True
        done(self, request)

    @functools.wraps(lost)
    def connectionLost(self, reason):
        stop_timer(self)
        lost(self, reason)

    def _respondToBadRequestAndDisconnect(self):
        oversized = (
            self._receivedHeaderSize > self.totalHeadersSize
            or self._receivedHeaderCount > self.maxHeaders
        )
        self.transport.write(too_large if oversized else malformed)
        self.loseConnection()

    def lineLengthExceeded(self, line):  # one line past 16 KB: Twisted closed without a word
        self.transport.write(too_large)
        self.loseConnection()

    HTTPChannel.connectionMade = connectionMade
    HTTPChannel.dataReceived = dataReceived
    HTTPChannel.allHeadersReceived = allHeadersReceived
    HTTPChannel.requestDone = requestDone
    HTTPChannel.connectionLost = connectionLost
    HTTPChannel._respondToBadRequestAndDisconnect = _respondToBadRequestAndDisconnect
    HTTPChannel.lineLengthExceeded = lineLengthExceeded


def wsgi_environ(scope: dict, body) -> dict:
    """The WSGI environ for an ASGI HTTP scope (PEP 3333 names; repeated headers joined)."""
    script_name = scope.get("root_path", "")
    path = scope["path"]
    server_name, server_port = scope.get("server") or ("localhost", 80)
    environ = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": script_name.encode().decode("latin-1"),
        "PATH_INFO": path.removeprefix(script_name).encode().decode("latin-1"),
        "QUERY_STRING": scope["query_string"].decode("latin-1"),
        "SERVER_PROTOCOL": f"HTTP/{scope['http_version']}",
        "SERVER_NAME": server_name,
        "SERVER_PORT": str(server_port or 0),
        "REMOTE_ADDR": (scope.get("client") or ("", 0))[0],
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": body,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    for raw_name, raw_value in scope.get("headers", []):
        name = raw_name.decode("latin-1").upper().replace("-", "_")
        if name not in ("CONTENT_LENGTH", "CONTENT_TYPE"):
            name = f"HTTP_{name}"
        value = raw_value.decode("latin-1")
        environ[name] = f"{environ[name]},{value}" if name in environ else value
    return environ


class OneHopDjango:
    """An ASGI application serving Django's HTTP requests in one sync call each."""

    def __init__(self):
        self.django = WSGIHandler()
        # Their own threads: a burst of requests never holds up the sockets' claims and acks,
        # which run on the event loop's default pool.
        self.threads = ThreadPoolExecutor(settings.HTTP_THREADS, thread_name_prefix="http")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"OneHopDjango serves HTTP, not {scope['type']}")
        # As Django's own ASGI handler does: a large body spills to disk, not to memory.
        with SpooledTemporaryFile(max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE) as body:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return  # the client left before sending its body: nothing to answer
                body.write(message.get("body", b""))
                if not message.get("more_body"):
                    break
            size = body.tell()
            body.seek(0)
            status, headers, content = await sync_to_async(
                self.respond, thread_sensitive=False, executor=self.threads
            )(scope, body, size)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    def respond(self, scope, body, size: int) -> tuple[int, list, bytes]:
        """Run Django on one request, in one of the HTTP threads; the whole response, as bytes."""
        environ = wsgi_environ(scope, body)
        # The whole body is read: its length is known even when the client sent it chunked.
        environ["CONTENT_LENGTH"] = str(size)
        started = {}

        def start_response(status, headers, exc_info=None):
            started["status"] = int(status.split(" ", 1)[0])
            started["headers"] = [
                (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers
            ]

        response = self.django(environ, start_response)
        try:
            content = b"".join(response)
        finally:
            # Django's request_finished (connections back to the pool) fires here, in this
            # thread, as WSGI servers do it.
            getattr(response, "close", lambda: None)()
        return started["status"], started["headers"], content
