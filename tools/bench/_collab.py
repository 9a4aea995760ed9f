"""The benchmark's collaboration row: seed 001 sessions through the whole path, 1 to N at once.

Everything runs as it does in production (tools/bench/_system.py), as separate processes on
one embedded nats-server (`sync_interval: always`): the gate, the router and two agent hosts
whose scripted brains answer at once (`gpt`, `claude`: every turn hands over, so a session
runs to its cap). The benchmark submits sessions as `parley collab` does and waits for each
one's `session_completed`. A round is one agent turn: the router's call through the gate to the
agent, the answer back through the gate, and the router's compare-and-set, i.e. four
JetStream hops and two KV writes. For each level of concurrency it reports rounds per second
and the p50/p99 time of a whole session.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from bus import TraceHeaders
from schemas import HumanMessage, Namespace, SessionEvent, decode_envelope, encode, new_id, utc_now
from tools.bench._system import demo_system

__all__ = ("CollabRow", "collab_rows", "submit_sessions")

_HOPS_PER_ROUND = 4
_END = frozenset({"session_completed", "session_failed", "session_canceled"})


@dataclass
class CollabRow:
    sessions: int
    rounds: int
    rounds_per_s: float
    session_p50_ms: float
    session_p99_ms: float
    hops_per_s: float


class _Waiter:
    """Watches `parley.events.*.*` and times each session from submit to its last event."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.took: dict[str, float] = {}
        self.reasons: dict[str, str | None] = {}
        self.all_done = asyncio.Event()

    def expect(self, session_ids: list[str]) -> None:
        now = time.perf_counter()
        self.started = dict.fromkeys(session_ids, now)
        self.took.clear()
        self.all_done.clear()

    async def on_event(self, msg: Msg) -> None:
        event = decode_envelope(msg.data)
        if not isinstance(event, SessionEvent) or event.session_id not in self.started:
            return
        if event.event_type in _END:
            self.took[event.session_id] = time.perf_counter() - self.started[event.session_id]
            self.reasons[event.session_id] = event.stop_reason
            if len(self.took) == len(self.started):
                self.all_done.set()


def _session(n: int, rounds: int) -> HumanMessage:
    return HumanMessage(
        id=new_id(),
        created_at=utc_now(),
        text=f"Benchmark task {n}: keep improving the answer.",
        call_id=new_id(),
        mode="collaborate",
        participants=("gpt", "claude"),
        first_speaker="gpt",
        max_rounds=rounds,
        session_id=new_id(),
    )


async def _wave(
    nc: NATS, ns: Namespace, waiter: _Waiter, count: int, rounds: int, start: int
) -> list[float]:
    """Submit `count` sessions at once; wait for all of them; return each one's duration."""
    messages = [_session(start + i, rounds) for i in range(count)]
    await submit_sessions(nc, ns, waiter, messages, timeout_s=120 + count * rounds)
    wrong = {r for r in waiter.reasons.values() if r != "cap_reached"}
    if wrong:
        raise RuntimeError(f"benchmark sessions ended with {sorted(map(str, wrong))}")
    return list(waiter.took.values())


async def submit_sessions(
    nc: NATS, ns: Namespace, waiter: _Waiter, messages: list[HumanMessage], timeout_s: float
) -> None:
    """Submit `messages` at once, as `parley collab` does; wait until every session ended.

    Raises:
        TimeoutError: some had not ended within `timeout_s`.
    """
    js = nc.jetstream()
    waiter.expect([m.session_id or "" for m in messages])
    waiter.reasons.clear()
    acks = []
    for msg in messages:
        headers = TraceHeaders(trace_id=msg.id, origin="cli").to_headers(msg.id)
        acks.append(await js.publish_async(ns.submit("cli"), encode(msg), headers=headers))
    await asyncio.gather(*acks)
    await asyncio.wait_for(waiter.all_done.wait(), timeout=timeout_s)


async def collab_rows(levels: list[int], rounds: int, min_rounds: int) -> list[CollabRow]:
    """Run the collaboration benchmark at each concurrency level; one row per level."""
    ns = Namespace("benchcollab")
    async with demo_system(ns) as system:
        nc = system.nc
        waiter = _Waiter()
        sub = await nc.subscribe(ns.wildcard("events"), cb=waiter.on_event)
        await _wave(nc, ns, waiter, 1, rounds, 0)  # warm up every process
        rows = [await _level(nc, ns, waiter, n, rounds, min_rounds) for n in levels]
        await sub.unsubscribe()
    return rows


async def _level(
    nc: NATS, ns: Namespace, waiter: _Waiter, level: int, rounds: int, min_rounds: int
) -> CollabRow:
    durations: list[float] = []
    done = 0
    started = time.perf_counter()
    while done < max(min_rounds, level * rounds):
        durations += await _wave(nc, ns, waiter, level, rounds, 1 + done)
        done += level * rounds
    elapsed = time.perf_counter() - started
    ordered = sorted(durations)
    return CollabRow(
        sessions=level,
        rounds=done,
        rounds_per_s=done / elapsed,
        session_p50_ms=statistics.median(ordered) * 1000,
        session_p99_ms=ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000,
        hops_per_s=done * _HOPS_PER_ROUND / elapsed,
    )
