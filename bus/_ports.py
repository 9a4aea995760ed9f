"""Loopback ports for the servers Parley starts, chosen below the kernel's ephemeral range.

A server that is killed and started again (by `parley up`, by a supervisor, by a chaos test)
must get its port back: its clients reconnect to that URL. A port the kernel handed out for
a bind to port 0 is free for anyone while the server is down: the next process binding port
0 (another server's monitoring port, a test's HTTP origin) can be given it, and the restart
dies with `address already in use`. That happened to a cluster's route port in a test run,
before any node had started: a port the kernel picked for a probe, let go, was handed to
another server's monitoring port first. The kernel never hands out ports below its ephemeral
range that way, so a port drawn there stays ours as long as nobody asks for it by number.
"""

from __future__ import annotations

import secrets
import socket
from collections.abc import Collection
from pathlib import Path

__all__ = ("PortsExhausted", "free_port")

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


def free_port(taken: Collection[int] = ()) -> int:
    """A loopback port free now, below the kernel's ephemeral range, and not in `taken`
    (ports already drawn for servers not started yet: each probe is let go at once).

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
        if port not in taken:
            return port
    raise PortsExhausted(f"no free loopback port between {LOWEST_PORT} and {top}")
