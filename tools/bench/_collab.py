"""The benchmark's collaboration row: seed 001 sessions through the whole path, 1 to N at once.

Everything runs as it does in production, as separate processes on one embedded nats-server
(`sync_interval: always`): the gate, the router and two agent hosts whose scripted brains
answer at once (`gpt`, `claude`: every turn hands over, so a session runs to its cap). The
benchmark submits sessions as `parley collab` does and waits for each one's
`session_completed`. A round is one agent turn: the router's call through the gate to the
agent, the answer back through the gate, and the router's compare-and-set, i.e. four
JetStream hops and two KV writes. For each level of concurrency it reports rounds per second
and the p50/p99 time of a whole session.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from actors.gate import BUNDLE_KEY
from bus import EmbeddedServer, Supervisor, TraceHeaders, provision
from schemas import HumanMessage, Namespace, SessionEvent, decode_envelope, encode, new_id, utc_now
from tools.demo import DEMO_POLICY, demo_topology, sign_bundle

__all__ = ("CollabRow", "collab_rows")

_HOPS_PER_ROUND = 4
_END = frozenset({"session_completed", "session_failed", "session_canceled"})
_BENCH_LIMITS = {"rate_per_minute": 10_000_000, "trace_message_budget": 10_000}


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
    js = nc.jetstream()
    messages = [_session(start + i, rounds) for i in range(count)]
    waiter.expect([m.session_id or "" for m in messages])
    waiter.reasons.clear()
    acks = []
    for msg in messages:
        headers = TraceHeaders(trace_id=msg.id, origin="cli").to_headers(msg.id)
        acks.append(await js.publish_async(ns.submit("cli"), encode(msg), headers=headers))
    await asyncio.gather(*acks)
    await asyncio.wait_for(waiter.all_done.wait(), timeout=120 + count * rounds)
    wrong = {r for r in waiter.reasons.values() if r != "cap_reached"}
    if wrong:
        raise RuntimeError(f"benchmark sessions ended with {sorted(map(str, wrong))}")
    return list(waiter.took.values())


def _bench_bundle() -> dict[str, Any]:
    bundle = tomllib.loads(DEMO_POLICY.read_text())
    for profile in bundle["profiles"].values():
        profile.update(_BENCH_LIMITS)
    return bundle


async def collab_rows(levels: list[int], rounds: int, min_rounds: int) -> list[CollabRow]:
    """Run the collaboration benchmark at each concurrency level; one row per level."""
    ns = Namespace("benchcollab")
    rows: list[CollabRow] = []
    with tempfile.TemporaryDirectory(prefix="parley-bench-collab-") as scratch:
        server = EmbeddedServer(Path(scratch) / "nats")
        await asyncio.to_thread(server.start)
        nc = await nats.connect(server.url)
        stopping = asyncio.Event()
        ready = {name: asyncio.Event() for name in ("gate", "router", "gpt", "claude")}

        def on_line(name: str, line: str) -> None:
            if '"msg":"ready"' in line and name in ready:
                ready[name].set()
            if '"level":"error"' in line or "Traceback" in line:
                print(f"[{name}] {line}", flush=True)

        try:
            js = nc.jetstream()
            await provision(js, ns)
            signed, public = await asyncio.to_thread(
                sign_bundle, msgspec.json.encode(_bench_bundle()), Path(scratch) / "keys"
            )
            await (await js.key_value(ns.bucket("policy"))).put(BUNDLE_KEY, signed)
            env = {**os.environ, "NATS_URL": server.url, "PARLEY_MONITOR_URL": server.monitor_url}
            env["PARLEY_NAMESPACE"] = ns.root
            supervisor = Supervisor(demo_topology(public, "demo"), base_env=env, on_line=on_line)
            waiter = _Waiter()
            sub = await nc.subscribe(ns.wildcard("events"), cb=waiter.on_event)
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(supervisor.run(stopping))
                try:
                    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in ready.values())), 60)
                    await _wave(nc, ns, waiter, 1, rounds, 0)  # warm up every process
                    rows.extend(
                        [await _level(nc, ns, waiter, n, rounds, min_rounds) for n in levels]
                    )
                finally:
                    stopping.set()
            await sub.unsubscribe()
        finally:
            await nc.close()
            await asyncio.to_thread(server.stop)
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
