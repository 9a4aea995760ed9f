"""A NATS client whose `flush()` is a barrier for every command sent before it.

nats-py writes a flush's PING straight to the socket, while the commands before it (a SUB just
made, a publish) wait in a buffer for its flusher task: the PING can reach the server first,
and its PONG come back before the server has the subscription. A person's command that
subscribes to its timeline, flushes and then submits, or a test that subscribes and then has
another connection publish, could then miss what it subscribed for (a CI failure of the
least-privilege test: the timeline's event came before the subscription did). Here the
flusher is asked to write the buffer out first, and the PING goes once it has.

The wait for the flusher is bounded by the flush's own timeout and never cancels inside
nats-py (whose buffered flush swallows a cancellation): a server that stopped reading fails
the flush in time, as nats-py's own flush does.
"""

from __future__ import annotations

import asyncio
import time

from nats.aio.client import DEFAULT_FLUSH_TIMEOUT
from nats.aio.client import Client as NATS
from nats.errors import FlushTimeoutError
from nats.protocol.command import hpub_cmd

from bus._header_block import KnownKeys, header_block

__all__ = ("BarrierClient",)


class BarrierClient(NATS):
    def __init__(self) -> None:
        super().__init__()
        self._known_keys = KnownKeys()

    async def _send_publish(
        self,
        subject: str,
        reply: str,
        payload: bytes,
        payload_size: int,
        headers: dict[str, str] | None,
    ) -> None:
        """nats-py's, with the header block built in one pass where it can be
        (bus/_header_block.py): the same bytes, a fraction of the CPU."""
        block = header_block(headers, self._known_keys) if headers and subject else None
        if block is None:
            await super()._send_publish(subject, reply, payload, payload_size, headers)
            if headers:
                self._known_keys.learn(headers)
            return
        # What nats-py's own does once it has the block (nats-py 2.16, aio/client.py).
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += payload_size
        await self._send_command(hpub_cmd(subject, reply, block, payload))
        if self._flush_queue is not None and self._flush_queue.empty():
            await self._flush_pending()

    async def flush(self, timeout: int = DEFAULT_FLUSH_TIMEOUT) -> None:
        """Have the flusher write what waits in the buffer, then PING and wait for the PONG,
        within `timeout` in all."""
        started = time.monotonic()
        flusher, queue = self._flusher_task, self._flush_queue
        if self.is_connected and flusher is not None and not flusher.done() and queue is not None:
            written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            try:
                # The flusher writes all pending, then resolves it (a full queue of kicks
                # makes room as the flusher works).
                await asyncio.wait_for(queue.put(written), timeout)
            except TimeoutError:
                raise FlushTimeoutError from None
            done, _ = await asyncio.wait({written}, timeout=timeout - (time.monotonic() - started))
            if not done:
                raise FlushTimeoutError
        left = max(timeout - (time.monotonic() - started), 0.001)
        await super().flush(left)  # type: ignore[arg-type]
