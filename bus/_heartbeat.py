"""An actor's heartbeat in the registry KV bucket, so others can tell who is alive.

A failed write is logged and retried within `RETRY_S`, not a whole period later: a registry
hiccup must never stop an actor from handling messages, and an actor whose server died (or
whose registry bucket was electing a leader) must be seen beating again soon after it can
be. Others judge it dead after `missed_beats` silent periods (actors/router/_turn_watch.py);
with one period's wait after each failed attempt (itself up to a request timeout), two failed
attempts across a node's loss had already made a live agent look dead for 16 s.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence

from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from bus._connection import Uptime
from schemas import ActorHeartbeat, Namespace, encode, heartbeat_key, utc_now

__all__ = ("RETRY_S", "Heartbeat")

log = logging.getLogger("parley.bus.heartbeat")

RETRY_S = 1.0
"""How soon a failed beat is tried again (never later than the period)."""


class Heartbeat:
    """Writes `heartbeat.<actor_id>` to the registry bucket every `period_s` seconds."""

    def __init__(
        self,
        js: JetStreamContext,
        ns: Namespace,
        actor_id: str,
        kind: str,
        period_s: float,
        inputs: Sequence[str],
        uptime: Uptime | None = None,
    ) -> None:
        self._js = js
        self._uptime = uptime
        self._failing = False
        self._bucket = ns.bucket("registry")
        self._key = heartbeat_key(actor_id)
        self._started_at = utc_now()
        self._period_s = period_s
        self._template = {"actor_id": actor_id, "kind": kind, "inputs": tuple(inputs)}
        self._kv: KeyValue | None = None

    async def beat(self) -> None:
        """Write one heartbeat now."""
        record = ActorHeartbeat(
            pid=os.getpid(),
            started_at=self._started_at,
            beat_at=utc_now(),
            period_s=self._period_s,
            **self._template,  # type: ignore[arg-type]
        )
        try:
            if self._kv is None:  # opened once (a request of its own), again after a failure
                self._kv = await self._js.key_value(self._bucket)
            await self._kv.put(self._key, encode(record))
        except Exception as exc:
            self._kv = None
            if self._uptime is not None:
                self._uptime.lost()
            # Tried again every second while it fails: said once, then at debug level.
            level = logging.DEBUG if self._failing else logging.WARNING
            log.log(level, "heartbeat not written", extra={"error": repr(exc)})
            self._failing = True
            return
        if self._failing and self._uptime is not None:
            # JetStream (or the registry's quorum) is back, maybe long after the connection:
            # nobody could beat while it was away, so silence counts from now.
            self._uptime.mark()
        self._failing = False

    async def run(self, stopping: asyncio.Event) -> None:
        """Beat every period until `stopping` is set (the first beat is `beat()` at start),
        and within `RETRY_S` after a beat that failed."""
        while True:
            wait = min(self._period_s, RETRY_S) if self._failing else self._period_s
            try:
                async with asyncio.timeout(wait):
                    await stopping.wait()
                return
            except TimeoutError:
                await self.beat()
