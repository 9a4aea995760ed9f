"""`parley bench`'s gate rows: one gate process against a raw nats-py relay, in one run.

- `relay-raw`: what an expert writes with nats-py alone to move envelopes between the same two
  JetStream streams: pull batches of 64 from `PARLEY_SUBMIT`, decode, `publish_async` each to
  `parley.deliver.<target>`, await the batch's acks, `ack_sync` the inputs.
- `relay-guarded`: the same relay storing, with nats-py alone, what the gate stores for each
  envelope to keep its guarantees: the id's create-only claim first (a round per batch), then
  the root's trace record, the position, the delivery and the decision together. Only the
  gate's id look-up (one batched read per batch, which nats-py has no call for) is left out.
  Its figures over the raw relay's are the floor those guarantees set for any client.
- `gate`: Parley's gate (actors/gate/_actor.py) in its runtime, with a signed bundle: decode, derive
  the position, decide, commit the counters, record the position, deliver, publish the
  decision, ack.

Both read the same envelopes: roots from a `bench` profile to `sink`, each starting its own
trace (the gate's most expensive case: a new trace record per envelope). Throughput is taken
over a pre-loaded backlog (first input ack to last); latency one envelope at a time, from the
publish until the input is acked (its delivery stored), minus the p50/p99 of a direct
JetStream publish to the target in the same run: the latency each adds. `decide` times the
pure core (`plan()` + `decide()`) alone.
"""

from __future__ import annotations

import asyncio
import secrets
import statistics
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import nats
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from prometheus_client import CollectorRegistry

from actors.gate import BUNDLE_KEY, Allow, GateActor, Ledger, Route, Submission, decide, plan
from bus import (
    MSG_ID,
    ActorMetrics,
    ActorRuntime,
    EmbeddedServer,
    load_settings,
    provision,
    scratch_directory,
)
from schemas import (
    BUNDLE_PAYLOAD_TYPE,
    AgentCall,
    AgentResponse,
    AnyEnvelope,
    HumanMessage,
    Namespace,
    PolicyBundle,
    ProfilePolicy,
    Reply,
    decode_envelope,
    encode,
    new_id,
    sign_payload,
    utc_now,
)
from tools.bench._kit import AckCounter, bench_envelope, percentile_us, preload

__all__ = ("ROWS", "decide_timing", "gate_rounds", "summarise_gate")

ROWS = ("relay-raw", "relay-guarded", "gate")


def _limitless(**fields: object) -> ProfilePolicy:
    """A profile whose counted limits never refuse: the benchmark measures the work, not
    the refusals."""
    return msgspec.convert(
        {
            "rate_per_minute": 10**9,
            "trace_message_budget": 10**9,
            "max_concurrent_calls": 10**6,
            "max_fan_out": 10**6,
            **fields,
        },
        ProfilePolicy,
    )


def _bundle() -> PolicyBundle:
    return PolicyBundle(
        schema_version="1.0",
        version=1,
        tenant_id="bench",
        expires_at=utc_now() + timedelta(days=1),
        profiles={
            "bench": _limitless(
                start_traces=True, speaks_for_person=True, allowed_targets=("sink",)
            ),
            "sink": _limitless(allowed_targets=("bench",)),
        },
    )


_CREATE_ONLY = {"Nats-Expected-Last-Subject-Sequence": "0"}


async def _guarded_stores(
    js: JetStreamContext, ns: Namespace, envelopes: list[tuple[AnyEnvelope, bytes]]
) -> None:
    """The gate's stores for a batch, in its order: the claims, then everything else."""
    ids, traces = ns.bucket("idempotency"), ns.bucket("traces")
    # Requests, not publish_async: nats-py leaves a refused publish_async's future unresolved.
    await asyncio.gather(
        *(
            js.publish(f"$KV.{ids}.id.{env.id}", b"claim", headers=_CREATE_ONLY)
            for env, _ in envelopes
        )
    )
    effects = []
    for envelope, data in envelopes:
        target = getattr(envelope, "target", "sink")
        effects += [
            await js.publish_async(f"$KV.{traces}.trace.{envelope.id}", b"trace"),
            await js.publish_async(f"$KV.{traces}.pos.{envelope.id}", b"position"),
            await js.publish_async(ns.deliver(target), data, headers={MSG_ID: f"{envelope.id}:d"}),
            await js.publish_async(ns.decisions("bench"), b"decision"),
        ]
    await asyncio.gather(*effects)


async def _relay(url: str, ns: Namespace, stop: asyncio.Event, guarded: bool = False) -> None:
    """The reference relay, on its own connection as the gate has; `guarded`: storing what
    the gate stores per envelope (`_guarded_stores`)."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    sub = await js.pull_subscribe(
        ns.wildcard("submit"), durable="relay", stream=ns.stream("submit")
    )
    while not stop.is_set():
        try:
            msgs = await sub.fetch(64, timeout=0.5)
        except TimeoutError:
            continue
        envelopes = [(decode_envelope(msg.data), msg.data) for msg in msgs]
        if guarded:
            await _guarded_stores(js, ns, envelopes)
        else:
            effects = []
            for envelope, data in envelopes:
                target = getattr(envelope, "target", "sink")
                effects.append(
                    await js.publish_async(
                        ns.deliver(target), data, headers={MSG_ID: f"{envelope.id}:d"}
                    )
                )
            await asyncio.gather(*effects)
        await asyncio.gather(*(msg.ack_sync() for msg in msgs))
    await sub.unsubscribe()
    await nc.drain()


async def _gate(url: str, ns: Namespace, keys: Path, stop: asyncio.Event) -> None:
    settings = load_settings(
        nats_url=url,
        namespace=ns.root,
        actor_id="gate",
        provision=False,
        log_level="WARNING",
        # A key of the run's own: the bench's gates run without credentials to derive one
        # from, and one gate's random key warns for agreeing with no replica.
        options={
            "policy_keys": [str(keys)],
            "tenant": "bench",
            "redaction_key_file": str(keys.with_name("redaction.key")),
        },
    )
    runtime = ActorRuntime(GateActor(settings), ActorMetrics(CollectorRegistry(), "gate"))
    await runtime.run(stop)


async def _direct_publish(nc: NATS, ns: Namespace, count: int) -> list[float]:
    js = nc.jetstream()
    samples = []
    for _ in range(count):
        envelope = bench_envelope("sink")
        t0 = time.perf_counter()
        await js.publish(ns.deliver("sink"), encode(envelope), headers={MSG_ID: envelope.id})
        samples.append(time.perf_counter() - t0)
    return samples


async def _measure(
    nc: NATS, ns: Namespace, name: str, url: str, keys: Path, count: int, backlog: int
) -> dict[str, Any]:
    acks = AckCounter()
    sniff = await nc.subscribe(f"$JS.ACK.{ns.stream('submit')}.>", cb=acks.on_ack)
    await preload(nc, ns.submit("bench"), backlog, "sink")
    acks.expect(backlog)
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tasks:
        if name == "gate":
            tasks.create_task(_gate(url, ns, keys, stop))
        else:
            tasks.create_task(_relay(url, ns, stop, guarded=name == "relay-guarded"))
        await asyncio.wait_for(acks.first.wait(), 60)
        cpu0, t0, done0 = time.process_time(), time.perf_counter(), acks.count
        await asyncio.wait_for(acks.reached.wait(), 600)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
        moved = max(acks.count - done0, 1)
        samples: list[float] = []
        js = nc.jetstream()
        for i in range(count + 20):  # the first 20 warm up
            acks.expect(1)
            envelope = bench_envelope("sink")
            t_start = time.perf_counter()
            await js.publish(ns.submit("bench"), encode(envelope), headers={MSG_ID: envelope.id})
            await asyncio.wait_for(acks.reached.wait(), 10)
            if i >= 20:
                samples.append(time.perf_counter() - t_start)
        stop.set()
    await sniff.unsubscribe()
    return {"row": name, "samples": samples, "rate": moved / wall, "cpu": cpu / moved * 1e6}


async def gate_rounds(fsync: bool, count: int, backlog: int, rounds: int) -> list[dict[str, Any]]:
    """Alternating relay and gate runs on one embedded server; raw figures per run."""
    results: list[dict[str, Any]] = []
    key = Ed25519PrivateKey.generate()
    with (
        scratch_directory("parley-bench-gate-") as store,
        EmbeddedServer(Path(store) / "nats", sync_always=fsync) as server,
    ):
        keys = Path(store) / "policy.pub"
        (Path(store) / "redaction.key").write_bytes(secrets.token_hex(32).encode())
        keys.write_bytes(
            key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
        )
        signed = sign_payload(msgspec.json.encode(_bundle()), BUNDLE_PAYLOAD_TYPE, key)
        nc = await nats.connect(server.url)
        try:
            for turn in range(rounds):
                for name in ROWS if turn % 2 == 0 else ROWS[::-1]:
                    ns = Namespace(f"gb{turn}{name.replace('-', '')}")
                    await provision(nc.jetstream(), ns)
                    policy = await nc.jetstream().key_value(ns.bucket("policy"))
                    await policy.put(BUNDLE_KEY, signed)
                    result = await _measure(nc, ns, name, server.url, keys, count, backlog)
                    result["direct"] = await _direct_publish(nc, ns, count)
                    result["fsync"] = "always" if fsync else "lazy"
                    results.append(result)
        finally:
            await nc.close()
    return results


def summarise_gate(results: list[dict[str, Any]], fsync: str) -> dict[str, Any]:
    """Rows and the gate/relay ratios for one fsync setting."""
    out: dict[str, Any] = {}
    for name in ROWS:
        chosen = [r for r in results if r["row"] == name and r["fsync"] == fsync]
        samples = [s for r in chosen for s in r["samples"]]
        direct = [s for r in chosen for s in r["direct"]]
        out[name] = {
            "p50_us": percentile_us(samples, 0.5),
            "p99_us": percentile_us(samples, 0.99),
            "added_p50_us": percentile_us(samples, 0.5) - percentile_us(direct, 0.5),
            "added_p99_us": percentile_us(samples, 0.99) - percentile_us(direct, 0.99),
            "throughput": statistics.median(r["rate"] for r in chosen),
            "cpu_us_per_envelope": statistics.median(r["cpu"] for r in chosen),
        }
    relay, guarded, gate = (out[name] for name in ROWS)
    out["ratios"] = _ratios(gate, relay)
    out["floor"] = _ratios(guarded, relay)  # what the gate's stores cost any client
    out["over_floor"] = _ratios(gate, guarded)  # what Parley adds on top of those stores
    return out


def _ratios(row: dict[str, Any], base: dict[str, Any]) -> dict[str, float]:
    return {
        "throughput": row["throughput"] / base["throughput"],
        "added_p50": row["added_p50_us"] / max(base["added_p50_us"], 1.0),
        "added_p99": row["added_p99_us"] / max(base["added_p99_us"], 1.0),
    }


def decide_timing(count: int = 20_000) -> dict[str, float]:
    """p50 and p99 of `plan()` + `decide()` in µs, over a session's calls and answers
    (router -> gpt, gpt -> router, …) on one trace, with every record already at hand."""
    bundle = PolicyBundle(
        schema_version="1.0",
        version=1,
        tenant_id="bench",
        expires_at=utc_now() + timedelta(days=1),
        profiles={
            "cli": _limitless(
                start_traces=True, speaks_for_person=True, allowed_targets=("router",)
            ),
            "router": _limitless(allowed_targets=("gpt",)),
            "gpt": _limitless(allowed_targets=("router",)),
        },
    )
    ledger = Ledger()
    now = int(time.time() * 1000)
    start = HumanMessage(
        id=new_id(), created_at=utc_now(), text="go", call_id=new_id(), target="router"
    )
    first = plan(Submission(start, "cli", "", {}, now), None, bundle, "")
    if not isinstance(first, Route):
        raise RuntimeError(f"the benchmark's bundle refused its first envelope: {first}")
    cause = first.position
    reply = Reply(message="ok")
    samples = []
    call_id = ""
    for n in range(count):
        envelope: AnyEnvelope
        if n % 2 == 0:
            sender, call_id = "router", new_id()
            envelope = AgentCall(
                id=new_id(), created_at=utc_now(), target="gpt", call_id=call_id, goal="g"
            )
        else:
            sender = "gpt"  # its answer names the call it answers, or the gate refuses it
            envelope = AgentResponse(
                id=new_id(), created_at=utc_now(), sender="gpt", text="ok", call_id=call_id,
                reply=reply,
            )  # fmt: skip
        sub = Submission(envelope, sender, cause.envelope_id, {}, now + n)
        t0 = time.perf_counter_ns()
        route = plan(sub, cause, bundle, "")
        outcome = decide(route, ledger, bundle) if isinstance(route, Route) else route
        samples.append((time.perf_counter_ns() - t0) / 1e9)
        if not isinstance(outcome, Allow):
            raise RuntimeError(f"the benchmark's session was refused: {outcome}")
        cause = outcome.route.position
    return {"p50_us": percentile_us(samples, 0.5), "p99_us": percentile_us(samples, 0.99)}
