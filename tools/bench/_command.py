"""`parley bench`: Parley's envelope path against raw nats-py, in one run, as ratios.

Rows (each on the same embedded server settings, for both fsync settings where JetStream is
involved), raw and Parley runs alternating so that machine noise hits both alike:

- `core-rr`: raw nats-py core request/reply round trip of one msgspec envelope (decode and
  re-encode in the responder): the floor of any NATS round trip here.
- `js-raw`: raw nats-py JetStream: publish, pull, decode, ack (latency, one at a time); and a
  throughput run where a consumer decodes each envelope, republishes an effect, awaits the
  effects' acks, then acks the inputs (the same work Parley's runtime does).
- `js-parley`: the same envelope through Parley's runtime (encode, JetStream publish, durable
  consumer, decode, headers, context, handler, effect, ack).
- `latency` (tools/bench/_latency.py): one `say` at a time through every process, after idle
  gaps, against the same hops in raw nats-py.
- `relay` (tools/bench/_relay.py): the shared-agent relay's forwards/s and one-at-a-time
  latency, against a raw nats-py relay doing the same sealing over the same gateway.

Latency is measured one message at a time from publish until the input is acked (effect
stored); throughput and CPU per
envelope over a pre-loaded backlog, consumer side only. Results print as a table and are
written as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import statistics
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import nats
import uvloop
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from prometheus_client import CollectorRegistry

from bus import (
    SENDER,
    Actor,
    ActorMetrics,
    ActorRuntime,
    Context,
    EmbeddedServer,
    load_settings,
    provision,
    scratch_directory,
    stop_like_interrupt,
)
from schemas import (
    AgentResponse,
    AnyEnvelope,
    HumanMessage,
    Namespace,
    Reply,
    decode_envelope,
    derive_id,
    encode,
    utc_now,
)
from tools.bench._audit import audit_rows
from tools.bench._collab import collab_rows
from tools.bench._context import context_row
from tools.bench._gate import decide_timing, gate_rounds, summarise_gate
from tools.bench._kit import AckCounter, bench_envelope, percentile_us, preload
from tools.bench._latency import latency_rows
from tools.bench._llmstream import llm_step
from tools.bench._options import ROWS, bench_parser, resolve
from tools.bench._otel import otel_step
from tools.bench._publish import publish_rows
from tools.bench._relay import relay_rows, turn_rows
from tools.bench._scale import scale_step
from tools.bench._table import (
    print_audit,
    print_collab,
    print_context,
    print_gate,
    print_latency,
    print_publish,
    print_relay,
    print_runtime,
)
from tools.bench._toolcall import tools_step

__all__ = ("main",)


@dataclass
class Row:
    name: str
    fsync: str
    p50_us: float
    p99_us: float
    throughput: float
    cpu_us_per_envelope: float | None = None


def _effect_of(envelope: AnyEnvelope, attempt: int = 1) -> AgentResponse:
    return AgentResponse(
        id=derive_id(envelope.id, "bench"),
        created_at=utc_now(),
        sender="bench",
        text="ok",
        call_id=envelope.id,
        reply=Reply(message="ok"),
        attempt=attempt,
    )


class _BenchActor(Actor):
    """Parley's side: decode is done by the runtime; the handler submits one effect."""

    kind: ClassVar[str] = "bench"

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        await ctx.submit(_effect_of(envelope, ctx.attempt))


async def _core_round_trips(nc: NATS, count: int) -> Row:
    async def respond(msg: Msg) -> None:
        envelope = decode_envelope(msg.data)
        await msg.respond(encode(_effect_of(envelope)))

    sub = await nc.subscribe("bench.core", cb=respond)
    payload = encode(bench_envelope())
    samples = []
    started = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        reply = await nc.request("bench.core", payload, timeout=5)
        decode_envelope(reply.data)
        samples.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - started
    await sub.unsubscribe()
    return Row(
        "core-rr", "-", percentile_us(samples, 0.5), percentile_us(samples, 0.99), count / elapsed
    )


async def _publish(nc: NATS, ns: Namespace, envelope: HumanMessage) -> None:
    await nc.jetstream().publish(
        ns.deliver("bench"), encode(envelope), headers={"Nats-Msg-Id": envelope.id, SENDER: "bench"}
    )


async def _raw_consumer(url: str, ns: Namespace, stop: asyncio.Event) -> None:
    """The reference: what an expert writes with nats-py alone for the runtime's job.

    It has its own connection, as Parley's runtime does (and as any consumer process would).
    """
    nc = await nats.connect(url)
    js = nc.jetstream()
    sub = await js.pull_subscribe(ns.deliver("bench"), durable="raw", stream=ns.stream("deliver"))
    while not stop.is_set():
        try:
            msgs = await sub.fetch(64, timeout=0.5)
        except TimeoutError:
            continue
        effects = []
        for msg in msgs:
            effect = _effect_of(decode_envelope(msg.data))
            effects.append(
                await js.publish_async(
                    ns.submit("bench"), encode(effect), headers={"Nats-Msg-Id": effect.id}
                )
            )
        await asyncio.gather(*effects)
        await asyncio.gather(*(msg.ack_sync() for msg in msgs))
    await sub.unsubscribe()
    await nc.drain()


async def _parley_consumer(url: str, ns: Namespace, stop: asyncio.Event) -> None:
    settings = load_settings(
        nats_url=url, namespace=ns.root, actor_id="bench", provision=False, log_level="WARNING"
    )
    runtime = ActorRuntime(_BenchActor(settings), ActorMetrics(CollectorRegistry(), "bench"))
    await runtime.run(stop)


Consumer = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


async def _measure(
    nc: NATS, ns: Namespace, consumer: Consumer, latency_count: int, backlog: int
) -> tuple[list[float], float, float]:
    """Throughput and CPU over a pre-loaded backlog, then latency one message at a time."""
    acks = AckCounter()
    sniff = await nc.subscribe(f"$JS.ACK.{ns.stream('deliver')}.>", cb=acks.on_ack)
    await preload(nc, ns.deliver("bench"), backlog, headers={SENDER: "bench"})
    acks.expect(backlog)
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(consumer(stop))
        await asyncio.wait_for(acks.first.wait(), 30)
        # The consumer runs in this process and the backlog is already stored, so process
        # CPU time from the first ack to the last is the consumer's own cost.
        cpu0, t0, done0 = time.process_time(), time.perf_counter(), acks.count
        await asyncio.wait_for(acks.reached.wait(), 300)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
        moved = max(acks.count - done0, 1)  # a tiny backlog can finish before we look
        samples: list[float] = []
        for i in range(latency_count + 20):  # the first 20 warm up
            acks.expect(1)
            t_start = time.perf_counter()
            await _publish(nc, ns, bench_envelope())
            await asyncio.wait_for(acks.reached.wait(), 10)
            if i >= 20:
                samples.append(time.perf_counter() - t_start)
        stop.set()
    await sniff.unsubscribe()
    return samples, moved / wall, cpu / moved * 1e6


async def _jetstream_rows(
    fsync: bool, args: argparse.Namespace, rounds: list[dict[str, Any]]
) -> None:
    with (
        scratch_directory("parley-bench-") as store,
        EmbeddedServer(Path(store), sync_always=fsync) as server,
    ):
        label = "always" if fsync else "lazy"
        nc = await nats.connect(server.url)
        try:
            for turn in range(args.rounds):
                for name in ("js-raw", "js-parley") if turn % 2 == 0 else ("js-parley", "js-raw"):
                    ns = Namespace(f"bench{turn}{name.replace('-', '')}")
                    await provision(nc.jetstream(), ns)
                    consumer: Consumer
                    if name == "js-raw":
                        consumer = functools.partial(_raw_consumer, server.url, ns)
                    else:
                        consumer = functools.partial(_parley_consumer, server.url, ns)
                    samples, rate, cpu = await _measure(nc, ns, consumer, args.count, args.backlog)
                    rounds.append(
                        {"row": name, "fsync": label, "samples": samples, "rate": rate, "cpu": cpu}
                    )
        finally:
            await nc.close()


def _summarise(rounds: list[dict[str, Any]], name: str, fsync: str) -> Row:
    chosen = [r for r in rounds if r["row"] == name and r["fsync"] == fsync]
    samples = [s for r in chosen for s in r["samples"]]
    return Row(
        name,
        fsync,
        percentile_us(samples, 0.5),
        percentile_us(samples, 0.99),
        statistics.median(r["rate"] for r in chosen),
        statistics.median(r["cpu"] for r in chosen),
    )


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    rows: list[Row] = []
    with (
        scratch_directory("parley-bench-") as store,
        EmbeddedServer(Path(store)) as server,
    ):
        nc = await nats.connect(server.url)
        rows.append(await _core_round_trips(nc, args.count))
        await nc.close()
    rounds: list[dict[str, Any]] = []
    for sync_always in (True, False):
        await _jetstream_rows(sync_always, args, rounds)
    ratios = {}
    for fsync in ("always", "lazy"):
        raw, parley = _summarise(rounds, "js-raw", fsync), _summarise(rounds, "js-parley", fsync)
        rows += [raw, parley]
        raw_cpu, parley_cpu = raw.cpu_us_per_envelope or 1.0, parley.cpu_us_per_envelope or 1.0
        ratios[fsync] = {
            "p50_latency": parley.p50_us / raw.p50_us,
            "p99_latency": parley.p99_us / raw.p99_us,
            "throughput": parley.throughput / raw.throughput,
            "cpu_per_envelope": parley_cpu / raw_cpu,
        }
    return {
        "rows": [asdict(r) for r in rows],
        "ratios_parley_to_raw": ratios,
        "settings": {
            "count": args.count,
            "backlog": args.backlog,
            "rounds": args.rounds,
            "loop": "uvloop",
        },
    }


async def _collab(args: argparse.Namespace) -> list[dict[str, Any]]:
    levels = [int(level) for level in args.collab_sessions.split(",") if level]
    rows = await collab_rows(levels, args.collab_rounds, args.collab_min_rounds)
    return [asdict(row) for row in rows]


async def _gate(args: argparse.Namespace) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for sync_always in (True, False):
        runs += await gate_rounds(sync_always, args.count, args.backlog, args.rounds)
    return {
        "always": summarise_gate(runs, "always"),
        "lazy": summarise_gate(runs, "lazy"),
        "decide": decide_timing(),
    }


def _steps(args: argparse.Namespace) -> list[tuple[str, str, Callable[[], None]]]:
    """The rows to run, each as (row, what it measures with these options, run it)."""
    result = args.result
    gaps = [float(gap) for gap in args.gaps.split(",") if gap]

    def runtime() -> None:
        result.update(uvloop.run(_run(args)))
        print_runtime(result)

    def gate() -> None:
        result["gate"] = uvloop.run(_gate(args))
        print_gate(result["gate"])

    def collab() -> None:
        result["collab"] = uvloop.run(_collab(args))
        print_collab(result)

    def audit() -> None:
        result["audit"] = uvloop.run(audit_rows(args.rounds, args.audit_backlog))
        print_audit(result["audit"])

    def latency() -> None:
        result["latency"] = [asdict(row) for row in uvloop.run(latency_rows(gaps, args.calls))]
        print_latency(result["latency"])

    def relay() -> None:
        rows = uvloop.run(relay_rows(args.relay_backlog, args.relay_calls, args.rounds))
        turns = uvloop.run(turn_rows(args.relay_turns, args.rounds))
        result["relay"] = {
            "forwards": [asdict(row) for row in rows],
            "turns": [asdict(row) for row in turns],
        }
        print_relay(result["relay"])

    def publish() -> None:
        result["publish"] = uvloop.run(publish_rows(args.rounds, args.publish_batches))
        print_publish(result["publish"])

    def context() -> None:
        result["context"] = context_row()
        print_context(result["context"])

    rounds = f"{args.rounds} alternating rounds"
    steps = {
        "runtime": (f"runtime: {args.backlog} envelopes a run, {rounds}", runtime),
        "gate": (f"gate: {args.backlog} envelopes a run, {rounds}", gate),
        "collab": (f"collab: sessions {args.collab_sessions}", collab),
        "audit": (f"audit: {args.audit_backlog} facts a run, {rounds}", audit),
        "latency": (f"latency: {args.calls} calls after gaps of {args.gaps} s", latency),
        "relay": (f"relay: {args.relay_backlog} calls a run, {rounds}", relay),
        "publish": (f"publish: {args.publish_batches} batches a run, {rounds}", publish),
        "context": ("context: seed 004's context bloat", context),
        "scale": scale_step(args, result),
        "tools": tools_step(args, result),
        "llm": llm_step(args, result),
        "otel": otel_step(args, result),
    }
    chosen = [args.only] if args.only else list(ROWS)
    if not args.audit_backlog and "audit" in chosen:
        chosen.remove("audit")
    return [(name, *steps[name]) for name in chosen]


def main(argv: list[str] | None = None) -> int:
    args = resolve(bench_parser(__doc__.splitlines()[0]).parse_args(argv))
    stop_like_interrupt()  # SIGTERM, SIGHUP: unwind like Ctrl-C, stopping servers and actors
    args.result = {}
    steps = _steps(args)
    began = time.monotonic()
    for number, (_name, what, run) in enumerate(steps, 1):
        print(f"parley bench: row {number} of {len(steps)}, {what} ...", flush=True)
        started = time.monotonic()
        run()
        print(f"parley bench: {what.split(':')[0]} done in {time.monotonic() - started:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(args.result, indent=2))
    print(f"\nwrote {args.out} ({time.monotonic() - began:.0f} s in all)")
    return 0
