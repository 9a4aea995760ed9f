"""The `audit` rows of `parley bench`: chained audit appends against raw `publish_async`.

- `audit-raw`: raw nats-py `publish_async` of audit-record-sized payloads with a
  `Nats-Msg-Id` each into a stream, all acks awaited: the most a single publisher gets from
  this server with `sync_interval: always`.
- `audit-parley`: the auditor actor (its runtime, durable consumer, redaction, chaining,
  pipelined appends at predicted sequences, signed checkpoints, acks) turning a stored
  backlog of gate decisions into audit records. Throughput is counted from the first input
  ack to the last (an input is acked only once its record is stored), and the chain is
  verified afterwards: a fast but broken chain does not count.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

import nats
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from nats.aio.client import Client as NATS
from prometheus_client import CollectorRegistry

from actors import AuditorActor
from bus import (
    ActorMetrics,
    ActorRuntime,
    EmbeddedServer,
    load_settings,
    provision,
    scratch_directory,
)
from schemas import Decision, ErrorCode, Namespace, encode, key_id, new_id, utc_now
from tools.audit import verify_stream
from tools.bench._kit import AckCounter

__all__ = ("audit_rows",)


def _decision(i: int) -> Decision:
    envelope_id = new_id()
    return Decision(
        id=new_id(),
        created_at=utc_now(),
        allowed=False,
        code=ErrorCode.TARGET_NOT_ALLOWED,
        rule="targets",
        message="bench may not call target",
        sender=f"bench{i % 4}",
        target="target",
        envelope_id=envelope_id,
        envelope_kind="agent_call",
        trace_id=envelope_id,
        origin="bench",
        objective="summarise the quarterly report for the finance team " * 2,
        preview="benchmark preview text of a typical size " * 4,
        bundle_version=1,
        decided_at=utc_now(),
    )


async def _raw(nc: NATS, ns: Namespace, count: int, size: int) -> float:
    js = nc.jetstream()
    payload = b"x" * size
    started = time.perf_counter()
    futures = [
        await js.publish_async(ns.audit("bench", "raw"), payload, headers={"Nats-Msg-Id": new_id()})
        for _ in range(count)
    ]
    await asyncio.gather(*futures)
    return count / (time.perf_counter() - started)


async def _parley(
    nc: NATS, server: EmbeddedServer, ns: Namespace, count: int, key_dir: Path
) -> dict[str, Any]:
    key = Ed25519PrivateKey.generate()
    key_path = key_dir / f"{ns.root}.key"
    key_path.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    js = nc.jetstream()
    futures = []
    for i in range(count):
        fact = _decision(i)
        futures.append(
            await js.publish_async(
                ns.decisions(fact.sender), encode(fact), headers={"Nats-Msg-Id": fact.id}
            )
        )
    await asyncio.gather(*futures)
    acks = AckCounter()
    acks.expect(count)
    sniff = await nc.subscribe(f"$JS.ACK.{ns.stream('events')}.>", cb=acks.on_ack)
    settings = load_settings(
        nats_url=server.url,
        monitor_url=server.monitor_url,
        namespace=ns.root,
        actor_id="auditor",
        provision=False,
        log_level="WARNING",
        fetch_batch=256,
        max_in_flight=1024,
        options={"signing_key": str(key_path), "tenant": "bench"},
    )
    runtime = ActorRuntime(AuditorActor(settings), ActorMetrics(CollectorRegistry(), "bench"))
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(runtime.run(stop))
        await asyncio.wait_for(acks.first.wait(), 30)
        await asyncio.wait_for(acks.reached.wait(), 300)
        rate = (acks.count - 1) / max(time.perf_counter() - acks.t_first, 1e-9)
        stop.set()
    await sniff.unsubscribe()
    report = await verify_stream(
        js, ns.stream("audit"), trusted={key_id(key.public_key()): key.public_key()}
    )
    return {"rate": rate, "chain_ok": report.ok and report.records == count}


async def audit_rows(rounds: int, count: int) -> dict[str, Any]:
    """Alternate raw and auditor runs on one `sync_interval: always` server; return medians."""
    raw_rates: list[float] = []
    parley_rates: list[float] = []
    chain_ok = True
    with (
        scratch_directory("parley-bench-") as store,
        EmbeddedServer(Path(store), sync_always=True) as server,
    ):
        nc = await nats.connect(server.url)
        size = len(encode(_decision(0))) + 400  # a record: the fact's fields plus chain fields
        try:
            for turn in range(rounds):
                for name in ("raw", "parley") if turn % 2 == 0 else ("parley", "raw"):
                    ns = Namespace(f"bench{turn}audit{name}")
                    await provision(nc.jetstream(), ns)
                    if name == "raw":
                        raw_rates.append(await _raw(nc, ns, count, size))
                    else:
                        run = await _parley(nc, server, ns, count, Path(store))
                        parley_rates.append(run["rate"])
                        chain_ok &= run["chain_ok"]
        finally:
            await nc.close()
    raw, parley = statistics.median(raw_rates), statistics.median(parley_rates)
    return {
        "raw_publish_async_per_s": raw,
        "auditor_records_per_s": parley,
        "ratio": parley / raw,
        "chain_intact": chain_ok,
        "records_per_run": count,
        "rounds": rounds,
    }
