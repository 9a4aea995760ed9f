"""What every `parley bench` row measures with: a finish line seen from outside, percentiles.

The finish line of a consumer, raw or Parley, is its input acks as JetStream sees them on
`$JS.ACK.<stream>.>`: no hook in either side, the same line for both.
"""

from __future__ import annotations

import asyncio
import time

from nats.aio.msg import Msg

__all__ = ("AckCounter", "percentile_us")


class AckCounter:
    """Counts input acks (not in-progress heartbeats or naks) and wakes a waiter at a target."""

    def __init__(self) -> None:
        self.count = 0
        self.target = 0
        self.reached = asyncio.Event()
        self.first = asyncio.Event()
        self.t_first = 0.0

    async def on_ack(self, msg: Msg) -> None:
        if msg.data not in (b"", b"+ACK"):
            return  # in-progress heartbeats and naks are not completions
        self.count += 1
        if not self.first.is_set():
            self.t_first = time.perf_counter()
            self.first.set()
        if self.count >= self.target:
            self.reached.set()

    def expect(self, more: int) -> None:
        """Set the target `more` acks past the ones counted so far."""
        self.target = self.count + more
        self.reached.clear()


def percentile_us(samples: list[float], q: float) -> float:
    """The `q` quantile of `samples` (seconds), in microseconds."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6
