"""A real HTTP server on a loopback address for Network.Http's tests, counting every request.

Plain stdlib `ThreadingHTTPServer` on a port the OS picks. The paths it serves: `/hello`
(a short text), `/host` (the Host header it was sent), `/redirect?to=URL` (a 302 to URL),
`/loop` (a 302 to itself), `/flood` (a body that never ends, written until the client
hangs up). Every request is recorded before it is answered, so "this server was never
reached" is `hits == []`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

__all__ = ("Hit", "Origin", "origin")

FLOOD_CHUNK = b"x" * 65536


@dataclass(frozen=True)
class Hit:
    path: str
    host_header: str


@dataclass
class Origin:
    """One running server: where it listens and what reached it."""

    address: str
    port: int
    hits: list[Hit] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str, host: str | None = None) -> str:
        return f"http://{host or self.address}:{self.port}{path}"

    def seen(self) -> list[Hit]:
        with self.lock:
            return list(self.hits)


def _handler(state: Origin) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the test reads `hits`, not a log."""

        def _answer(self, status: int, body: bytes, **headers: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            with state.lock:
                state.hits.append(Hit(parts.path, self.headers.get("Host", "")))
            if parts.path == "/hello":
                self._answer(200, b"hello from the origin")
            elif parts.path == "/host":
                self._answer(200, self.headers.get("Host", "").encode())
            elif parts.path == "/redirect":
                self._answer(302, b"", Location=parse_qs(parts.query)["to"][0])
            elif parts.path == "/loop":
                self._answer(302, b"", Location="/loop")
            elif parts.path == "/flood":
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                try:
                    while True:
                        self.wfile.write(FLOOD_CHUNK)
                except (BrokenPipeError, ConnectionResetError):
                    return
            else:
                self._answer(404, b"no such path")

    return Handler


@contextmanager
def origin(address: str = "127.0.0.1") -> Iterator[Origin]:
    """Serve on `address` (any 127.x.y.z works on Linux) until the block ends."""
    state = Origin(address=address, port=0)
    server = ThreadingHTTPServer((address, 0), _handler(state))
    server.daemon_threads = True
    state.port = server.server_address[1]
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
