"""The relay row: Parley's shared-agent relay against a raw nats-py relay, same gateway.

Both read calls the gate delivered to a shared agent (`deliver.bob-byte-doc`, on a deployment
server with `sync_interval: always`), seal each one to Bob's device (Ed25519 then HPKE, the
same `seal_frame`) and store the frame on the gateway server; the reference is
tools/bench/_rawrelay.py. Two figures per path, each round alternating which goes first:

- forwards/s: a backlog of calls stored before the relay starts, timed from its first input
  ack to its last as JetStream sees them (`$JS.ACK.…`, tools/bench/_kit.py);
- latency: then one call at a time, from its delivery to its frame on the gateway.

And an orchestrated turn's added latency (`turn_rows`): two locked-down deployments and the
gateway (tools/_shared_deployments.py), Alice's router calling Bob's `byte-doc` over the
relays or a `byte-doc` of her own, sessions alternating; each turn's remote leg is the time
between the router sending the draft and its handling the answer (the timeline events' own
times, one clock).

Each run gets a fresh namespace and gateway, so no run inherits another's backlog. The gateway
is locked down as `parley gateway-config` writes one: both relays log in with the calling
device's seed there, and its operator creates the stream and watches the frames.
The aims (issue 16): Parley >= 0.7x the raw relay's forwards/s, p50 <= 1.3x its latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from actors.relay import DeviceKeys, save_shared_agent
from bus import (
    MSG_ID,
    SENDER,
    EmbeddedServer,
    TraceHeaders,
    owned_argv,
    provision,
    python_command,
    scratch_directory,
)
from schemas import AgentCall, Namespace, SharedAgent, encode, new_id, utc_now
from tools._shared_deployments import shared_deployments
from tools._shared_sessions import orchestrate
from tools.bench._kit import AckCounter, percentile_us
from tools.bench._rawrelay import DURABLE, SESSION
from tools.natsconf import (
    GATEWAY_ADMIN,
    connect_gateway_operator,
    create_gateway_stream,
    write_gateway_config,
)

__all__ = ("RelayRow", "TurnRow", "relay_rows", "turn_rows")

SHARED = "bob-byte-doc"
_TEXT = "Which endpoints of this API accept requests without authentication? " * 4
_RUN_RAW = "import asyncio, sys; from tools.bench._rawrelay import run_raw_relay; " + (
    "asyncio.run(run_raw_relay(*sys.argv[1:5]))"
)
_TIMEOUT_S = 300.0


@dataclass
class RelayRow:
    path: str
    forwards: int
    forwards_per_s: float
    calls: int
    p50_ms: float
    p99_ms: float


@dataclass
class TurnRow:
    path: str
    turns: int
    p50_ms: float
    p99_ms: float


@dataclass
class _Sides:
    home: EmbeddedServer
    dir: Path
    alice: DeviceKeys
    bob: DeviceKeys


@dataclass(frozen=True)
class _Gateway:
    server: EmbeddedServer
    seeds: dict[str, Path]


@contextlib.asynccontextmanager
async def _locked_gateway(sides: _Sides, root: str) -> AsyncIterator[_Gateway]:
    """A gateway of the run's own under `root`, its users the two devices and the operator."""
    directory = sides.dir / root
    devices = [sides.alice.device_id, sides.bob.device_id]
    seeds = write_gateway_config(directory / "config", devices, root)
    server = EmbeddedServer(
        directory / "store", authorization=directory / "config" / "authorization.conf"
    )
    await asyncio.to_thread(server.start)
    try:
        await create_gateway_stream(server.url, seeds[GATEWAY_ADMIN], root)
        yield _Gateway(server, seeds)
    finally:
        await asyncio.to_thread(server.stop)


def _call(number: int) -> tuple[bytes, dict[str, str]]:
    session = f"bench{number}-{new_id()[:8]}"
    call = AgentCall(
        id=new_id(),
        created_at=utc_now(),
        target=SHARED,
        call_id=new_id(),
        session_id=session,
        goal=_TEXT,
        text=_TEXT,
    )
    trace = TraceHeaders(trace_id=call.id, origin="bench").to_headers(call.id)
    return encode(call), {**trace, MSG_ID: call.id, SENDER: "router", SESSION: session}


@contextlib.asynccontextmanager
async def _relay(
    path: str, sides: _Sides, ns: Namespace, root: str, gateway: _Gateway
) -> AsyncIterator[None]:
    """The path's relay as a process of its own, past binding its consumer."""
    device_dir = sides.dir / "device"
    seed = str(gateway.seeds[sides.alice.device_id])
    if path == "parley":
        options = {
            "device_dir": str(device_dir),
            "relay_dir": str(sides.dir / "relay"),
            "gateway_url": gateway.server.url,
            "gateway_root": root,
            "gateway_nkey_seed_file": seed,
        }
        argv = python_command("-m", "tools", "run", "relay", "--id", "relay")
        env = {"NATS_URL": sides.home.url, "PARLEY_NAMESPACE": ns.root}
        env["PARLEY_OPTIONS"] = json.dumps(options)
        ready = b'"msg":"ready"'
    else:
        settings = {
            "device_dir": str(device_dir),
            "gateway_root": root,
            "gateway_seed": seed,
            "shared": SHARED,
            "agent": "byte-doc",
            "peer": sides.bob.device_id,
            "peer_kem": sides.bob.public.kem_key,
        }
        argv = python_command("-c", _RUN_RAW, sides.home.url, ns.root, gateway.server.url)
        argv.append(json.dumps(settings))
        env, ready = {}, b"ready"
    child = await asyncio.create_subprocess_exec(
        *owned_argv(argv),  # dies with the benchmark, however it ends
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert child.stdout is not None  # noqa: S101 - asked for above
    drain: asyncio.Task[None] | None = None
    try:
        async with asyncio.timeout(60):
            while ready not in (line := await child.stdout.readline()):
                if not line:
                    raise RuntimeError(f"the {path} relay exited before it was ready")

        async def drained() -> None:
            assert child.stdout is not None  # noqa: S101
            while await child.stdout.readline():
                pass

        drain = asyncio.create_task(drained())
        yield
    finally:
        if child.returncode is None:
            child.terminate()
        await child.wait()
        if drain is not None:
            await drain


async def _run(
    path: str, sides: _Sides, nc: NATS, run: int, backlog: int, calls: int
) -> tuple[float, list[float]]:
    """One run of one path: forwards/s over a stored backlog, then one-at-a-time latencies."""
    ns, root = Namespace(f"benchrelay{path}{run}"), f"benchgw{path}{run}"
    js = nc.jetstream()
    await provision(js, ns)
    subject = ns.deliver(SHARED)
    futures = []
    for number in range(backlog):
        data, headers = _call(number)
        futures.append(await js.publish_async(subject, data, headers=headers))
    await asyncio.gather(*futures)
    counter = AckCounter()
    durable = SHARED if path == "parley" else DURABLE
    await nc.subscribe(f"$JS.ACK.{ns.stream('deliver')}.{durable}.>", cb=counter.on_ack)
    counter.expect(backlog)
    frames: asyncio.Queue[float] = asyncio.Queue()

    async def on_frame(msg: Msg) -> None:
        frames.put_nowait(time.perf_counter())

    async with _locked_gateway(sides, root) as locked:
        gateway = await connect_gateway_operator(locked.server.url, locked.seeds[GATEWAY_ADMIN])
        try:
            async with _relay(path, sides, ns, root, locked):
                await asyncio.wait_for(counter.reached.wait(), _TIMEOUT_S)
                rate = (backlog - 1) / max(time.perf_counter() - counter.t_first, 1e-9)
                await gateway.subscribe(f"{root}.>", cb=on_frame)
                await gateway.flush()
                samples = []
                for number in range(calls):
                    data, headers = _call(backlog + number)
                    started = time.perf_counter()
                    await js.publish(subject, data, headers=headers)
                    samples.append(await asyncio.wait_for(frames.get(), 30) - started)
        finally:
            await gateway.close()
    return rate, samples


async def relay_rows(backlog: int, calls: int, rounds: int) -> list[RelayRow]:
    """`rounds` runs of each path (alternating which goes first); one row per path."""
    with scratch_directory("parley-bench-relay-") as scratch:
        directory = Path(scratch)
        home = EmbeddedServer(directory / "home")
        await asyncio.to_thread(home.start)
        sides = _Sides(home, directory, DeviceKeys.generate(), DeviceKeys.generate())
        sides.alice.save(directory / "device")
        shared = SharedAgent(name=SHARED, agent="byte-doc", device=sides.bob.public)
        save_shared_agent(directory / "relay", shared)
        rates: dict[str, list[float]] = {"raw": [], "parley": []}
        samples: dict[str, list[float]] = {"raw": [], "parley": []}
        nc = await nats.connect(home.url)
        try:
            for run in range(rounds):
                order = ["raw", "parley"] if run % 2 == 0 else ["parley", "raw"]
                for path in order:
                    rate, taken = await _run(path, sides, nc, run, backlog, calls)
                    rates[path].append(rate)
                    samples[path] += taken
        finally:
            await nc.close()
            await asyncio.to_thread(home.stop)
    return [
        RelayRow(
            path=path,
            forwards=backlog * rounds,
            forwards_per_s=sorted(rates[path])[len(rates[path]) // 2],
            calls=len(samples[path]),
            p50_ms=percentile_us(samples[path], 0.5) / 1000,
            p99_ms=percentile_us(samples[path], 0.99) / 1000,
        )
        for path in ("raw", "parley")
    ]


async def turn_rows(turns: int, rounds: int) -> list[TurnRow]:
    """`rounds` full_auto sessions of `turns` turns per path; one row per path."""
    legs: dict[str, list[float]] = {"byte-doc": [], "bob-byte-doc": []}
    with scratch_directory("parley-bench-turns-") as scratch:
        async with shared_deployments(
            Path(scratch), sys.stdout, local_copy=True, rate_per_minute=10_000_000
        ) as running:
            for run in range(rounds):
                order = list(legs) if run % 2 == 0 else list(reversed(legs))
                for shared in order:
                    sent = {}
                    async for event in orchestrate(running.alice, "bench", shared, turns):
                        role = event.payload.get("role")
                        if event.event_type == "step_started" and role == "outbound":
                            sent[event.round] = event.created_at
                        elif event.event_type == "step_completed" and role == "remote_agent":
                            taken = event.created_at - sent[event.round]
                            legs[shared].append(taken.total_seconds())
    return [
        TurnRow(
            path=path,
            turns=len(legs[shared]),
            p50_ms=percentile_us(legs[shared], 0.5) / 1000,
            p99_ms=percentile_us(legs[shared], 0.99) / 1000,
        )
        for path, shared in (("one deployment", "byte-doc"), ("over the relay", "bob-byte-doc"))
    ]
