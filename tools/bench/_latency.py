"""The benchmark's latency row: one `say` at a time, after idle gaps, Parley against raw nats-py.

A `say` through Parley is the person's message to the gate, on to the router, the router's
call through the gate to the agent (a scripted brain that answers at once), the answer back
through the gate to the router, and the session's end on the person's timeline: six
JetStream hops through four processes. The reference does the same hops with raw nats-py
pull consumers (tools/bench/_rawpath.py) on the same server. Calls are sequential, each
after an idle gap (0, 1, 5 and 30 s by default): an idle consumer's pull loop is what the
3.4-5.5 s stalls of issue 18 came from, so the gaps are the point, and a call's latency is
measured from the person's publish to the event that ends it. Each gap runs the raw path's
calls and then Parley's (the order alternating from gap to gap), so each path idles for
exactly the gap between its calls. The aims: p99 within 2x of p50 at every gap, max under
250 ms, p50 within 1.3x of the raw path.

A third path, `guarded`, is the raw one doing the stores and reads Parley's guarantees take in
sequence (tools/bench/_rawpath.py): its p50 over the raw path's is the floor those guarantees
set for any client, and Parley's p50 over it what Parley adds on top.

Each row also gives the CPU time every process of the run (the server, the path's actors or
roles) spent while its calls were in flight, per call (tools/bench/_cpu.py): on two cores a
path needing more CPU per call than the other cannot be as quick.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from bus import TraceHeaders, owned_argv, provision, python_command
from schemas import HumanMessage, Namespace, SessionEvent, decode_envelope, encode, new_id, utc_now
from tools.bench._cpu import CpuSample, Descendants
from tools.bench._kit import percentile_us
from tools.bench._rawpath import ROLES, SESSION, STEP, TARGET
from tools.bench._system import demo_system

__all__ = ("LatencyRow", "latency_rows")

_WARM_UP_CALLS = 5
_RUN_ROLE = "import asyncio, sys; from tools.bench._rawpath import run_role; " + (
    "asyncio.run(run_role(*sys.argv[1:5]))"
)
_CALL_TIMEOUT_S = 30.0


@dataclass
class LatencyRow:
    gap_s: float
    path: str
    calls: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    cpu_ms: float
    """CPU of every process of the run (server included) while a call was in flight, per call."""
    server_cpu_ms: float
    """The nats-server's share of `cpu_ms`."""


class _Timeline:
    """The person's timelines, live: wakes the caller when the session it waits for ends."""

    def __init__(self) -> None:
        self.waiting_for = ""
        self.ended = asyncio.Event()

    def expect(self, session_id: str) -> None:
        self.waiting_for = session_id
        self.ended.clear()

    async def on_parley_event(self, msg: Msg) -> None:
        event = decode_envelope(msg.data)
        if (
            isinstance(event, SessionEvent)
            and event.session_id == self.waiting_for
            and event.event_type == "session_completed"
        ):
            self.ended.set()

    async def on_raw_event(self, msg: Msg) -> None:
        if (msg.headers or {}).get(SESSION) == self.waiting_for:
            self.ended.set()


def _say() -> HumanMessage:
    return HumanMessage(
        id=new_id(),
        created_at=utc_now(),
        text="Benchmark: answer at once.",
        call_id=new_id(),
        mode="single",
        participants=("gpt",),
        first_speaker="gpt",
        max_rounds=1,
        session_id=new_id(),
    )


Call = Callable[[], Awaitable[float]]


def _parley_call(nc: NATS, ns: Namespace, timeline: _Timeline) -> Call:
    async def call() -> float:
        msg = _say()
        timeline.expect(msg.session_id or "")
        headers = TraceHeaders(trace_id=msg.id, origin="cli").to_headers(msg.id)
        started = time.perf_counter()
        await nc.jetstream().publish(ns.submit("cli"), encode(msg), headers=headers)
        await asyncio.wait_for(timeline.ended.wait(), _CALL_TIMEOUT_S)
        return time.perf_counter() - started

    return call


def _raw_call(nc: NATS, ns: Namespace, timeline: _Timeline) -> Call:
    async def call() -> float:
        msg = _say()
        session_id = msg.session_id or ""
        timeline.expect(session_id)
        headers = {TARGET: "router", STEP: "ask", SESSION: session_id}
        started = time.perf_counter()
        await nc.jetstream().publish(ns.submit("cli"), encode(msg), headers=headers)
        await asyncio.wait_for(timeline.ended.wait(), _CALL_TIMEOUT_S)
        return time.perf_counter() - started

    return call


@contextlib.asynccontextmanager
async def _raw_path(url: str, ns: Namespace, path: str) -> AsyncIterator[None]:
    """The raw roles of `path` ("raw" or "guarded") as processes of their own, each past
    binding its consumer."""
    children = []
    try:
        for role in ROLES:
            child = await asyncio.create_subprocess_exec(
                *owned_argv(python_command("-c", _RUN_ROLE, role, url, ns.root, path)),
                stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            children.append(child)
            assert child.stdout is not None  # noqa: S101 - asked for above
            line = await asyncio.wait_for(child.stdout.readline(), 30)
            if line.strip() != b"ready":
                raise RuntimeError(f"{path} {role} did not start")
        yield
    finally:
        for child in children:
            if child.returncode is None:
                child.terminate()
            await child.wait()


@dataclass
class _Measured:
    durations: list[float]
    cpu: CpuSample


def _row(gap_s: float, path: str, measured: _Measured) -> LatencyRow:
    samples, calls = measured.durations, len(measured.durations)
    return LatencyRow(
        gap_s=gap_s,
        path=path,
        calls=calls,
        p50_ms=percentile_us(samples, 0.5) / 1000,
        p99_ms=percentile_us(samples, 0.99) / 1000,
        max_ms=max(samples) * 1000,
        cpu_ms=(measured.cpu.server_s + measured.cpu.others_s) * 1000 / calls,
        server_cpu_ms=measured.cpu.server_s * 1000 / calls,
    )


async def _calls(call: Call, count: int, gap_s: float, processes: Descendants) -> _Measured:
    measured = _Measured([], CpuSample())
    for _ in range(count):
        await asyncio.sleep(gap_s)  # the idle gap under test, not a wait for anything
        before = processes.cpu()
        measured.durations.append(await call())
        measured.cpu += processes.cpu() - before
    return measured


async def latency_rows(gaps: list[float], calls: int) -> list[LatencyRow]:
    """The three paths at each idle gap, `calls` sequential calls each; three rows per gap."""
    ns = Namespace("benchlatency")
    raw_ns, guarded_ns = Namespace("benchlatencyraw"), Namespace("benchlatencyguarded")
    rows: list[LatencyRow] = []
    async with demo_system(ns) as system:
        nc = system.nc
        timeline = _Timeline()
        await nc.subscribe(ns.wildcard("events"), cb=timeline.on_parley_event)
        for own in (raw_ns, guarded_ns):  # streams stored as Parley's
            await provision(nc.jetstream(), own)
            await nc.subscribe(own.wildcard("events"), cb=timeline.on_raw_event)
        url = system.server.url
        async with _raw_path(url, raw_ns, "raw"), _raw_path(url, guarded_ns, "guarded"):
            paths = {
                "raw": _raw_call(nc, raw_ns, timeline),
                "guarded": _raw_call(nc, guarded_ns, timeline),
                "parley": _parley_call(nc, ns, timeline),
            }
            processes = Descendants()
            for call in paths.values():
                await _calls(call, _WARM_UP_CALLS, 0, processes)
            for turn, gap_s in enumerate(gaps):
                order = list(paths) if turn % 2 == 0 else list(reversed(paths))
                measured = {
                    path: await _calls(paths[path], calls, gap_s, processes) for path in order
                }
                rows += [_row(gap_s, path, measured[path]) for path in paths]
    return rows
