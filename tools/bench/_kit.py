"""What every `parley bench` row measures with: a finish line seen from outside, percentiles,
and the envelopes it pre-loads.

The finish line of a consumer, raw or Parley, is its input acks as JetStream sees them on
`$JS.ACK.<stream>.>`: no hook in either side, the same line for both.
"""

from __future__ import annotations

import asyncio
import time

from msgspec import structs
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from schemas import HumanMessage, encode, new_id, utc_now

_TEXT = "benchmark envelope of a typical size " * 4

__all__ = ("AckCounter", "bench_envelope", "percentile_us", "preload")


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


def bench_envelope(target: str | None = None) -> HumanMessage:
    """An envelope of a typical size, with fresh ids (to `target`, or the kind's default)."""
    envelope = HumanMessage(id=new_id(), created_at=utc_now(), text=_TEXT, call_id=new_id())
    return envelope if target is None else structs.replace(envelope, target=target)


async def preload(
    nc: NATS,
    subject: str,
    count: int,
    target: str | None = None,
    headers: dict[str, str] | None = None,
) -> None:
    """Store `count` envelopes on `subject` before the consumer under test starts."""
    js = nc.jetstream()
    futures = []
    for _ in range(count):
        envelope = bench_envelope(target)
        sent = {"Nats-Msg-Id": envelope.id, **(headers or {})}
        futures.append(await js.publish_async(subject, encode(envelope), headers=sent))
    await asyncio.gather(*futures)
