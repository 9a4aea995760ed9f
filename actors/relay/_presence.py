"""The shared agents' presence here: a registry heartbeat and profile for each one.

The router judges a call still unanswered by its target's heartbeat (an agent never seen is
given `start_grace_s`, then taken for not running). A shared agent runs on another
deployment and never beats here; its host on this side is the relay, so the relay beats in
its name: a call to it is waited on while the relay runs (the relay queues it through a
gateway outage), and taken for lost when the relay is gone, as for any agent. The profile
(`kind = "shared_agent"`) names the device the agent lives on, which the router puts in its
audit fields as seed 000's target device.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence

from nats.js.kv import KeyValue

from schemas import (
    ActorHeartbeat,
    ProfileSummary,
    SharedAgent,
    encode,
    heartbeat_key,
    profile_key,
    utc_now,
)

__all__ = ("SharedPresence",)

log = logging.getLogger("parley.relay")


class SharedPresence:
    """Writes `heartbeat.<name>` every `period_s`, and `profile.<name>` once, per shared agent."""

    def __init__(
        self, registry: KeyValue, relay_id: str, shared: Sequence[SharedAgent], period_s: float
    ) -> None:
        self._registry = registry
        self._relay_id = relay_id
        self._shared = tuple(shared)
        self._period_s = period_s
        self._started_at = utc_now()

    async def announce(self) -> None:
        """Say which device each shared agent lives on, and beat once."""
        for agent in self._shared:
            summary = ProfileSummary(
                name=agent.name,
                actor_id=self._relay_id,
                kind="shared_agent",
                backend="relay",
                description=f"{agent.agent} on device {agent.device.device_id[:16]}",
                device_id=agent.device.device_id,
                written_at=utc_now(),
            )
            await self._registry.put(profile_key(agent.name), encode(summary))
        await self.beat()

    async def beat(self) -> None:
        """One heartbeat per shared agent; a failed write waits for the next beat."""
        for agent in self._shared:
            record = ActorHeartbeat(
                actor_id=agent.name,
                kind="shared_agent",
                pid=os.getpid(),
                started_at=self._started_at,
                beat_at=utc_now(),
                period_s=self._period_s,
            )
            try:
                await self._registry.put(heartbeat_key(agent.name), encode(record))
            except Exception as exc:
                log.warning("shared agent heartbeat not written", extra={"error": repr(exc)})

    async def run(self, stopping: asyncio.Event) -> None:
        """Beat every period until `stopping` is set."""
        while True:
            try:
                async with asyncio.timeout(self._period_s):
                    await stopping.wait()
                return
            except TimeoutError:
                await self.beat()
