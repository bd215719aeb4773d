"""The HTTP server every stand-in of an outside service runs on: a real server on a free
loopback port, in threads of the test process, handing each request to ``answer``."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class LocalServer:
    METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")

    def answer(self, http: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    def start(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def handle_any(self):
                standin.answer(self)

            def log_message(self, *args):
                pass

        for method in self.METHODS:
            setattr(Handler, f"do_{method}", Handler.handle_any)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"
