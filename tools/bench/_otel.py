"""The `otel` row of `parley bench`: what OpenTelemetry tracing costs a process that has it off.

Tracing off, the bus's hot path runs one guard per handled envelope and one per published
envelope (`bus._tracing.tracer is not None and ...`, bus/_runtime.py and bus/_outbox.py), and
nothing else: no span, no context, no header parsing. The row measures, in one run:

- `guard`: the guarded path against the same path with no instrumentation at all: the
  hot path's own guard statement, then the work, against the work alone, each timed over a
  million calls (best of several repeats), as nanoseconds a guard adds;
- `off`: the CPU Parley's runtime spends per envelope with tracing off (decode, context,
  handler, one effect, settle, ack) over a pre-loaded backlog, as in the runtime row;
- `on`: the same with spans made for every envelope and every effect (an SDK tracer whose
  spans go nowhere: the making, not the exporting), when the `otel` extra is installed;
  for scale, not judged.

The verdict: the guards' share of an envelope's CPU with tracing off, two guards per
envelope (one handled, one published), must stay under `AIM_SHARE`; it fails when a change
makes the off path do real work.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Final

import uvloop
from prometheus_client import CollectorRegistry

from bus import (
    SENDER,
    TRACEPARENT,
    Actor,
    ActorMetrics,
    ActorRuntime,
    Context,
    EmbeddedServer,
    TraceHeaders,
    _tracing,
    load_settings,
    provision,
    scratch_directory,
)
from schemas import AgentResponse, AnyEnvelope, Namespace, Reply, derive_id, new_id, utc_now
from tools.bench._kit import AckCounter, preload

__all__ = ("AIM_SHARE", "otel_step", "summarise_otel")

AIM_SHARE: Final = 0.005
"""The most of an envelope's CPU (with tracing off) the guards may take: 0.5 %, far below
the run-to-run spread of any row, so "nothing measurable"."""

GUARDS_PER_ENVELOPE: Final = 2
_GUARD_CALLS: Final = 1_000_000
_GUARD_REPEATS: Final = 7


class _Effecting(Actor):
    """Handles each envelope by submitting one effect (the runtime row's work)."""

    kind: ClassVar[str] = "bench"

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        await ctx.submit(
            AgentResponse(
                id=derive_id(envelope.id, "bench"),
                created_at=utc_now(),
                sender="bench",
                text="ok",
                call_id=envelope.id,
                reply=Reply(message="ok"),
            )
        )


def _guarded(headers: dict[str, str]) -> dict[str, str]:
    """The path with the hot path's guard (bus/_outbox.py), tracing off."""
    if _tracing.tracer is not None and TRACEPARENT in headers:
        _tracing.publish_span(None, "", b"", headers)
    return headers


def _bare(headers: dict[str, str]) -> dict[str, str]:
    """The same path with no instrumentation at all."""
    return headers


def guard_ns() -> dict[str, float]:
    """Nanoseconds a call of each path takes (best of the repeats) and what the guard adds."""
    if _tracing.tracer is not None:
        raise RuntimeError("the guard is timed with tracing off")
    headers = TraceHeaders(trace_id=new_id(), origin="bench").to_headers(new_id())
    timings = {}
    for name, path in (("guarded", _guarded), ("bare", _bare)):
        call = functools.partial(path, headers)
        best = min(timeit.repeat(call, number=_GUARD_CALLS, repeat=_GUARD_REPEATS))
        timings[name] = best / _GUARD_CALLS * 1e9
    return {**timings, "added_ns": timings["guarded"] - timings["bare"]}


async def _envelope_cpu_us(url: str, ns: Namespace, backlog: int) -> float:
    """CPU µs per envelope of Parley's runtime over a pre-loaded backlog (as the runtime
    row measures it: the consumer runs in this process, the backlog is stored first)."""
    import nats

    nc = await nats.connect(url)
    try:
        await provision(nc.jetstream(), ns)
        acks = AckCounter()
        sniff = await nc.subscribe(f"$JS.ACK.{ns.stream('deliver')}.>", cb=acks.on_ack)
        await preload(nc, ns.deliver("bench"), backlog, headers={SENDER: "bench"})
        acks.expect(backlog)
        settings = load_settings(
            nats_url=url, namespace=ns.root, actor_id="bench", provision=False, log_level="WARNING"
        )
        runtime = ActorRuntime(_Effecting(settings), ActorMetrics(CollectorRegistry(), "bench"))
        stop = asyncio.Event()
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(runtime.run(stop))
            await asyncio.wait_for(acks.first.wait(), 30)
            cpu0, done0 = time.process_time(), acks.count
            await asyncio.wait_for(acks.reached.wait(), 300)
            cpu, moved = time.process_time() - cpu0, max(acks.count - done0, 1)
            stop.set()
        await sniff.unsubscribe()
        return cpu / moved * 1e6
    finally:
        await nc.close()


def _span_maker() -> Callable[[bool], None] | None:
    """Turns span making on (an SDK tracer whose spans go nowhere) and off; None without the
    SDK (the `otel` extra)."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:
        return None
    tracer = TracerProvider().get_tracer("parley.bench")

    def switch(on: bool) -> None:
        _tracing.tracer = tracer if on else None

    return switch


async def otel_rows(backlog: int, rounds: int) -> dict[str, Any]:
    """The runtime's CPU per envelope, tracing off and on, alternating; and the guard."""
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    switch = _span_maker()
    modes = ["off", "on"] if switch is not None else ["off"]
    with (
        scratch_directory("parley-bench-") as store,
        EmbeddedServer(Path(store), sync_always=False) as server,
    ):
        for turn in range(rounds):
            for mode in modes if turn % 2 == 0 else modes[::-1]:
                if switch is not None:
                    switch(mode == "on")
                try:
                    ns = Namespace(f"benchotel{turn}{mode}")
                    cpu[mode].append(await _envelope_cpu_us(server.url, ns, backlog))
                finally:
                    if switch is not None:
                        switch(False)
    return summarise_otel(guard_ns(), cpu)


def summarise_otel(guard: dict[str, float], cpu: dict[str, list[float]]) -> dict[str, Any]:
    """The figures and the verdict: FAIL when nothing was measured, or when the guards
    take `AIM_SHARE` or more of an envelope's CPU with tracing off."""
    off = statistics.median(cpu["off"]) if cpu.get("off") else 0.0
    on = statistics.median(cpu["on"]) if cpu.get("on") else None
    added = max(guard["added_ns"], 0.0)
    share = GUARDS_PER_ENVELOPE * added / (off * 1000) if off > 0 else float("inf")
    return {
        "guard": guard,
        "off_cpu_us_per_envelope": off,
        "on_cpu_us_per_envelope": on,
        "guards_per_envelope": GUARDS_PER_ENVELOPE,
        "guard_share_of_envelope": share,
        "aim_share": AIM_SHARE,
        "pass": share < AIM_SHARE,
    }


def print_otel(summary: dict[str, Any]) -> None:
    guard = summary["guard"]
    print("\notel: tracing off against no instrumentation at all (tools/bench/_otel.py)")
    print(
        f"  guarded path {guard['guarded']:.1f} ns, bare path {guard['bare']:.1f} ns: "
        f"the guard adds {guard['added_ns']:.1f} ns"
    )
    print(f"  runtime CPU per envelope, tracing off: {summary['off_cpu_us_per_envelope']:.1f} µs")
    if summary["on_cpu_us_per_envelope"] is not None:
        print(
            "  runtime CPU per envelope, spans made (not exported): "
            f"{summary['on_cpu_us_per_envelope']:.1f} µs"
        )
    share = summary["guard_share_of_envelope"]
    verdict = "PASS" if summary["pass"] else "FAIL"
    print(
        f"  {summary['guards_per_envelope']} guards' share of an envelope's CPU, tracing off: "
        f"{share:.4%}, aim < {AIM_SHARE:.1%}: {verdict}"
    )


def otel_step(args: argparse.Namespace, result: dict[str, Any]) -> tuple[str, Callable[[], None]]:
    """The row as `parley bench` runs it: what it measures with these options, and the run."""

    def run() -> None:
        result["otel"] = uvloop.run(otel_rows(args.backlog, args.rounds))
        print_otel(result["otel"])

    what = f"otel: {args.backlog} envelopes a run, tracing off and on, {args.rounds} rounds"
    return what, run
