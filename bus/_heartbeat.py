"""An actor's heartbeat in the registry KV bucket, so others can tell who is alive.

A failed write is logged and retried at the next beat: a registry hiccup must never stop an
actor from handling messages.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence

from nats.js import JetStreamContext

from bus._connection import Uptime
from schemas import ActorHeartbeat, Namespace, encode, heartbeat_key, utc_now

__all__ = ("Heartbeat",)

log = logging.getLogger("parley.bus.heartbeat")


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
            kv = await self._js.key_value(self._bucket)
            await kv.put(self._key, encode(record))
        except Exception as exc:
            self._failing = True
            if self._uptime is not None:
                self._uptime.lost()
            log.warning("heartbeat not written", extra={"error": repr(exc)})
            return
        if self._failing and self._uptime is not None:
            # JetStream (or the registry's quorum) is back, maybe long after the connection:
            # nobody could beat while it was away, so silence counts from now.
            self._uptime.mark()
        self._failing = False

    async def run(self, stopping: asyncio.Event) -> None:
        """Beat every period until `stopping` is set (the first beat is `beat()` at start)."""
        while True:
            try:
                async with asyncio.timeout(self._period_s):
                    await stopping.wait()
                return
            except TimeoutError:
                await self.beat()
