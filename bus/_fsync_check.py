"""Refusing a nats-server that acknowledges writes before they reach disk.

JetStream acknowledges a publish once its stream stored it; with the server's default
`sync_interval` that store is in the page cache, and a server crash (or a host's) loses what
was acknowledged. Parley's promises (nothing acknowledged is lost) need `sync_interval:
always`, so an actor reads the server's monitoring endpoint before it connects and refuses a
lazy one unless told the risk is accepted (`allow_lazy_fsync`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.request
from typing import Any

from bus._settings import Settings

__all__ = ("FsyncCheckError", "check_fsync")

log = logging.getLogger("parley.bus.connection")


class FsyncCheckError(RuntimeError):
    """The server acknowledges writes before they reach disk and the actor was not told that
    is acceptable."""


def _read_varz(monitor_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{monitor_url.rstrip('/')}/varz", timeout=5) as response:  # noqa: S310 - operator-configured URL
        data: dict[str, Any] = json.load(response)
        return data


async def check_fsync(settings: Settings) -> bool | None:
    """Refuse a server that does not fsync every write, unless `allow_lazy_fsync`.

    `monitor_url` may list a cluster's nodes, comma-separated: every node that answers is
    checked (one that is down is no reason not to start; one that is lazy is).

    Returns True when the servers sync always, None when it cannot be told (no monitoring
    URL configured), and raises `FsyncCheckError` when one is lazy and that was not allowed.

    Raises:
        OSError: no monitoring URL answered.
    """
    if settings.monitor_url is None:
        log.warning(
            "cannot verify that nats-server fsyncs every write: no monitor_url configured "
            "(PARLEY_MONITOR_URL); acknowledged messages may be lost in a server crash "
            "unless its jetstream block sets sync_interval: always"
        )
        return None
    answered: list[tuple[str, bool]] = []
    unreachable: OSError | None = None
    for url in (part.strip() for part in settings.monitor_url.split(",")):
        try:
            varz = await asyncio.to_thread(_read_varz, url)
        except OSError as exc:
            unreachable = exc
            continue
        config = varz.get("jetstream", {}).get("config", {})
        answered.append((url, bool(config.get("sync_always", False))))
    if not answered:
        assert unreachable is not None  # noqa: S101 - the list has at least one URL
        raise unreachable
    lazy = [url for url, sync_always in answered if not sync_always]
    if lazy and not settings.allow_lazy_fsync:
        raise FsyncCheckError(
            f"nats-server at {', '.join(lazy)} does not fsync each write (jetstream "
            "sync_interval is not 'always'); acknowledged messages can be lost in a crash. Set "
            "`sync_interval: always` in its jetstream block, or pass --allow-lazy-fsync to "
            "accept the risk."
        )
    return not lazy
