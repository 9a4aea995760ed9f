"""A real HTTP server on a loopback address for Network.Http's tests, counting every request.

Plain stdlib `ThreadingHTTPServer` on a port the OS picks. The paths it serves: `/hello`
(a short text), `/host` (the Host header it was sent), `/redirect?to=URL` (a 302 to URL),
`/loop` (a 302 to itself), `/flood` (a body that never ends, written until the client
hangs up). Every request is recorded before it is answered, so "this server was never
reached" is `hits == []`. `tls_origin` is a TLS listener whose certificate no client trusts,
recording the server name (SNI) each client asks for.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ("Hit", "Origin", "TlsOrigin", "origin", "tls_origin")

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


@dataclass
class TlsOrigin:
    """A TLS listener with a self-signed certificate for `localhost`: no client that
    verifies certificates against the usual roots accepts it, so every handshake fails; what
    it records is the name each client asked for (SNI), None when it sent none."""

    port: int
    server_names: list[str | None] = field(default_factory=list)
    handshakes: threading.Event = field(default_factory=threading.Event)


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    certificate_path, key_path = directory / "origin.crt", directory / "origin.key"
    certificate_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return certificate_path, key_path


@contextmanager
def tls_origin(directory: Path) -> Iterator[TlsOrigin]:
    """Accept TLS connections on 127.0.0.1 until the block ends, recording each SNI."""
    certificate, key = _self_signed(directory)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificate, key)
    listener = socket.create_server(("127.0.0.1", 0))
    state = TlsOrigin(port=listener.getsockname()[1])

    def record(_socket: ssl.SSLObject | ssl.SSLSocket, name: str | None, _: object) -> None:
        state.server_names.append(name)
        state.handshakes.set()

    context.sni_callback = record

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:  # the listener was closed: the block ended
                return
            with connection, suppress(OSError):
                context.wrap_socket(connection, server_side=True).close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        with suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (close does not)
        listener.close()
        thread.join(timeout=10)
