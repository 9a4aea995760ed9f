"""A NATS client whose `flush()` is a barrier for every command sent before it.

nats-py writes a flush's PING straight to the socket, while the commands before it (a SUB just
made, a publish) wait in a buffer for its flusher task: the PING can reach the server first,
and its PONG come back before the server has the subscription. A person's command that
subscribes to its timeline, flushes and then submits, or a test that subscribes and then has
another connection publish, could then miss what it subscribed for (a CI failure of the
least-privilege test: the timeline's event came before the subscription did). Here the buffer
is written out before the PING goes, so the PONG follows everything sent before the flush.
"""

from __future__ import annotations

from nats.aio.client import DEFAULT_FLUSH_TIMEOUT
from nats.aio.client import Client as NATS

__all__ = ("BarrierClient",)


class BarrierClient(NATS):
    async def flush(self, timeout: int = DEFAULT_FLUSH_TIMEOUT) -> None:
        """Write what waits in the buffer, then PING and wait for the PONG."""
        if self.is_connected:
            await self._flush_pending(force_flush=True)
        await super().flush(timeout)
