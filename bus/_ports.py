"""Loopback ports for the servers Parley starts, chosen below the kernel's ephemeral range.

A server that is killed and started again (by `parley up`, by a supervisor, by a chaos test)
must get its port back: its clients reconnect to that URL. A port the kernel handed out for
a bind to port 0 is free for anyone while the server is down: the next process binding port
0 (another server's monitoring port, a test's HTTP origin) can be given it, and the restart
dies with `address already in use`. That happened to a cluster's route port in a test run,
before any node had started: a port the kernel picked for a probe, let go, was handed to
another server's monitoring port first. The kernel never hands out ports below its ephemeral
range that way, so a port drawn there stays ours as long as nobody asks for it by number.

Nobody but another Parley draw: a test run, a `parley up` or a bench on the same machine,
drawing while our server is down, found the port free and could take it (a chaos test keeps a
killed server down for 40 s). A drawn port is therefore claimed (`PortClaims`) for as long as
its server may come back: a Unix socket bound to a name in Linux's abstract namespace
(`parley-port-<port>`), which no other draw can bind, which the kernel lets go when its
holder closes it or dies, however, and which leaves no file behind.
"""

from __future__ import annotations

import errno
import secrets
import socket
import sys
from collections.abc import Collection
from pathlib import Path

__all__ = ("PortClaims", "PortsExhausted", "free_port")

LOWEST_PORT = 10_000
"""Below this are the well-known ports and the registered ones most often asked for by
number. Registered ports go on above it (to 49151): a service asking for one by number while
a Parley server holds it is the rare case this choice accepts, against a killed server's
port being given away by the kernel."""
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_DRAWS = 100


class PortsExhausted(RuntimeError):
    """No free loopback port was found between `LOWEST_PORT` and the ephemeral range."""


def _ephemeral_ports_start() -> int:
    """The lowest port the kernel hands to a socket bound to port 0 (Linux's default when it
    does not say)."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


class PortClaims:
    """The ports drawn for one owner (a server, a cluster's routes), each kept from every
    other draw on this machine until `release` (or until the owning process ends)."""

    def __init__(self) -> None:
        self._held: dict[int, socket.socket] = {}

    def keep(self, port: int, claim: socket.socket | None) -> None:
        if claim is not None:
            self._held[port] = claim

    def held(self) -> frozenset[int]:
        return frozenset(self._held)

    def release(self) -> None:
        """Let every port go: its server will not come back."""
        for claim in self._held.values():
            claim.close()
        self._held.clear()


def _claim(port: int) -> socket.socket | None:
    """The claim on `port` (a socket bound to its abstract name), None when another holds it.
    Off Linux, where there is no abstract namespace, a dummy claim nobody else can see."""
    if not sys.platform.startswith("linux"):
        return None
    claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        claim.bind(f"\0parley-port-{port}")
    except OSError:
        claim.close()
        raise
    return claim


def free_port(taken: Collection[int] = (), claims: PortClaims | None = None) -> int:
    """A loopback port free now, below the kernel's ephemeral range, not in `taken` (ports
    already drawn for servers not started yet: each probe is let go at once), and not claimed
    by another draw. With `claims`, the port is claimed there, kept from every other draw
    until they are released.

    Drawn at random, so two processes drawing at once rarely meet; a server that finds its
    port taken anyway is started again on another (`EmbeddedServer.start`).

    Raises:
        PortsExhausted: no draw found a free port.
    """
    top = _ephemeral_ports_start()
    kernels = top <= LOWEST_PORT + 1_000  # a range reaching that low: take the kernel's
    for _ in range(_DRAWS):
        port = 0 if kernels else LOWEST_PORT + secrets.randbelow(top - LOWEST_PORT)
        if port in taken:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = int(probe.getsockname()[1])
            if port in taken:
                continue
            try:
                claim = _claim(port)  # while the probe holds it: no draw of port 0 gets it
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:  # out of file descriptors, say
                    raise PortsExhausted(f"cannot claim a port ({exc}): not one was taken") from exc
                continue  # another draw's, for a server that is down
        if claims is None:
            if claim is not None:
                claim.close()
        else:
            claims.keep(port, claim)
        return port
    raise PortsExhausted(f"no free loopback port between {LOWEST_PORT} and {top}")
