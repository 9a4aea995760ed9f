"""`parley chaos`: the demo topology under load while a seeded schedule breaks it, then the
checker's verdict.

It starts an embedded nats-server, signs and publishes the demo policy, and starts the demo's
actors (gate, router, auditor, the scripted agents) as separate processes it controls. N
workers each run collaboration sessions back to back, as `parley collab` would submit them,
while the schedule (tools/_chaos_schedule.py, drawn from `--seed`) kills, pauses and restarts
chosen actors and the nats-server itself. After the run it waits for the sessions in flight,
reads the history back from JetStream (tools/_chaos_records.py), verifies the audit chain,
prints the checker's table and the seed, and exits 1 on any violation.

Recovery is measured from the moment a fault was healed (the process started again or
continued) to the next session transition, and bounded by the ack wait plus 5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import nats
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from actors import ACTORS
from bus import EmbeddedServer, TraceHeaders, provision
from schemas import (
    HumanMessage,
    Namespace,
    SessionEvent,
    decode_envelope,
    encode,
    key_id,
)
from tools._chaos_checker import ChaosReport, Fault, Published, check_history, format_report
from tools._chaos_procs import Child
from tools._chaos_records import history_from, read_stream
from tools._chaos_schedule import SERVER, PlannedFault, plan_faults
from tools.audit import verify_stream
from tools.demo import demo_message, demo_topology, publish_policy

__all__ = ("EVERY_ACTOR", "ChaosOptions", "add_chaos_command", "run_chaos")

CHAOS_POLICY = Path("deploy/policy/chaos.toml")
"""The demo bundle with agent answer rates a run cannot reach (see the file)."""
_CLI = "cli"
EVERY_ACTOR = "*"
"""A scenario's target meaning every actor of the topology at once."""
_ENDS = ("session_completed", "session_failed")


@dataclass(frozen=True)
class ChaosOptions:
    """What one run does."""

    seed: int = 1
    duration_s: float = 60.0
    sessions: int = 4
    ack_wait_s: float = 2.0
    server_faults: bool = True
    keep: Path | None = None
    agents: tuple[str, ...] = ("gpt", "claude")
    policy: Path = CHAOS_POLICY
    plan: tuple[PlannedFault, ...] | None = None
    """Faults to inject instead of the seed's schedule (a named scenario)."""


@dataclass
class _Load:
    """The load generator's record: roots JetStream acknowledged, sessions it is waiting on."""

    roots: list[Published] = field(default_factory=list)
    open: dict[str, asyncio.Event] = field(default_factory=dict)


async def _submit(js: JetStreamContext, ns: Namespace, msg: HumanMessage, until: float) -> int:
    """Submit as the CLI until JetStream acknowledges it (the same id each time, so a retry
    after a lost ack is de-duplicated); return its stream sequence, or 0 if the run ended."""
    headers = TraceHeaders(trace_id=msg.id, origin=_CLI).to_headers(msg.id)
    while time.monotonic() < until:
        try:
            ack = await js.publish(ns.submit(_CLI), encode(msg), headers=headers, timeout=2)
        except Exception:  # the server is down or restarting: try again, as a client would
            await asyncio.sleep(0.5)  # retry pacing while the broker is away
            continue
        return int(ack.seq)
    return 0


async def _worker(
    js: JetStreamContext,
    ns: Namespace,
    load: _Load,
    stop_at: float,
    give_up_at: float,
    session_timeout_s: float,
) -> None:
    """Run sessions one after another until `stop_at`."""
    while time.monotonic() < stop_at:
        msg = demo_message(user_id="chaos")
        assert msg.session_id is not None  # noqa: S101 - set just above
        ended = load.open.setdefault(msg.session_id, asyncio.Event())
        seq = await _submit(js, ns, msg, give_up_at)
        if seq == 0:
            load.open.pop(msg.session_id, None)
            return
        load.roots.append(Published(msg.id, seq, "gate", "human_message", time.time()))
        # A session that never ends is the checker's to report; the load goes on without it.
        patience = min(session_timeout_s, max(give_up_at - time.monotonic(), 0.1))
        try:
            async with asyncio.timeout(patience):
                await ended.wait()
        except TimeoutError:
            continue


async def _follow_events(nc: NATS, ns: Namespace, load: _Load) -> None:
    """Mark sessions ended as their end events pass (the checker reads them durably later)."""

    async def on_event(raw: Msg) -> None:
        try:
            event = decode_envelope(raw.data)
        except ValueError:
            return
        if isinstance(event, SessionEvent) and event.event_type in _ENDS:
            load.open.setdefault(event.session_id, asyncio.Event()).set()

    await nc.subscribe(ns.wildcard("events"), cb=on_event)


class _Faults:
    """Applies the planned faults to the children and the server; records when each healed."""

    def __init__(self, children: dict[str, Child], server: EmbeddedServer, out: TextIO) -> None:
        self.children = children
        self.server = server
        self.out = out
        self.healed: list[Fault] = []

    async def run(self, plan: list[PlannedFault], started: float) -> None:
        for fault in plan:
            delay = started + fault.at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # the schedule's own clock, not a synchronisation
            print(f"fault: {fault.describe()}", file=self.out, flush=True)
            await self._apply(fault)
            self.healed.append(Fault(fault.action, fault.target, time.time()))

    async def _apply(self, fault: PlannedFault) -> None:
        if fault.target == SERVER:
            if fault.action == "pause":
                os.kill(self.server.pid or 0, signal.SIGSTOP)
                await asyncio.sleep(fault.hold_s)  # the fault's length
                os.kill(self.server.pid or 0, signal.SIGCONT)
            else:
                await asyncio.to_thread(self.server.kill)
                await asyncio.sleep(fault.hold_s)  # the outage's length
                await asyncio.to_thread(self.server.start)
            return
        if fault.target == EVERY_ACTOR:
            await self._all_at_once(fault)
            return
        child = self.children[fault.target]
        if fault.action == "pause":
            child.send(signal.SIGSTOP)
            await asyncio.sleep(fault.hold_s)  # the pause's length
            child.send(signal.SIGCONT)
            return
        if fault.action == "kill":
            await asyncio.to_thread(child.kill)
            await asyncio.sleep(fault.hold_s)  # how long the supervisor takes to notice
        else:
            await asyncio.to_thread(child.terminate)
        child.start()
        if not await child.wait_ready():
            print(f"fault: {child.name} did not come back ready", file=self.out, flush=True)

    async def _all_at_once(self, fault: PlannedFault) -> None:
        """Every actor at once: SIGKILL (or SIGSTOP) them all, then bring them all back."""
        children = list(self.children.values())
        if fault.action == "pause":
            for child in children:
                child.send(signal.SIGSTOP)
            await asyncio.sleep(fault.hold_s)  # the pause's length
            for child in children:
                child.send(signal.SIGCONT)
            return
        for child in children:
            await asyncio.to_thread(child.kill)
        await asyncio.sleep(fault.hold_s)  # the outage's length
        for child in children:
            child.start()
        for child in children:
            if not await child.wait_ready():
                print(f"fault: {child.name} did not come back ready", file=self.out, flush=True)


async def _quiet(exc: Exception) -> None:
    del exc


async def _consumers(js: JetStreamContext, ns: Namespace, out: TextIO) -> None:
    """Where unfinished work sits: each consumer's pending, unacked and waiting counts."""
    for family in ("submit", "deliver", "events"):
        stream = ns.stream(family)
        try:
            infos = await js.consumers_info(stream)
        except Exception as exc:
            print(f"  {stream}: {exc!r}", file=out)
            continue
        for info in infos:
            print(
                f"  {stream}/{info.name}: pending {info.num_pending}, "
                f"unacked {info.num_ack_pending}, redelivered {info.num_redelivered}, "
                f"pull requests waiting {info.num_waiting}",
                file=out,
            )


async def run_chaos(options: ChaosOptions, out: TextIO = sys.stdout) -> tuple[int, ChaosReport]:
    """One chaos run; returns the exit code and the checker's report."""
    ns = Namespace("parley")
    with tempfile.TemporaryDirectory(prefix="parley-chaos-") as scratch:
        work = options.keep or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        server = EmbeddedServer(work / "nats")
        await asyncio.to_thread(server.start)
        nc = await nats.connect(
            server.url,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.25,
            ping_interval=5,
            error_cb=_quiet,  # the server's own faults: nats-py would print each one
        )
        children: dict[str, Child] = {}
        try:
            return await _run(options, ns, work, server, nc, children, out)
        finally:
            for child in children.values():
                await asyncio.to_thread(child.terminate, 5.0)
            await nc.close()
            await asyncio.to_thread(server.stop)


async def _run(
    options: ChaosOptions,
    ns: Namespace,
    work: Path,
    server: EmbeddedServer,
    nc: NATS,
    children: dict[str, Child],
    out: TextIO,
) -> tuple[int, ChaosReport]:
    js = nc.jetstream()
    await provision(js, ns)
    public = await publish_policy(js, ns, options.policy, work / "keys")
    topology = demo_topology(public, tenant="demo", agents=options.agents)
    base = {
        **os.environ,
        "NATS_URL": server.url,
        "PARLEY_MONITOR_URL": server.monitor_url,
        "PARLEY_ACK_WAIT_S": str(options.ack_wait_s),
        "PARLEY_MAX_DELIVER": "20",  # outlive every fault of the run, and then some
    }
    base.pop("PARLEY_NAMESPACE", None)
    for spec in topology.actor:
        env = {**base, **topology.child_env(spec)}
        children[spec.name] = Child(spec.name, spec.run, env, work / f"{spec.name}.log")
        children[spec.name].start()
    for child in children.values():
        if not await child.wait_ready():
            print(f"parley chaos: {child.name} did not start; see {work}", file=out)
            return 2, check_history([], [])
    plan = (
        list(options.plan)
        if options.plan is not None
        else plan_faults(
            options.seed,
            options.duration_s,
            list(children),
            include_server=options.server_faults,
        )
    )
    print(
        f"parley chaos: seed {options.seed}, {options.duration_s:.0f} s, {options.sessions} "
        f"concurrent sessions, ack wait {options.ack_wait_s} s, {len(plan)} faults",
        file=out,
        flush=True,
    )
    load = _Load()
    await _follow_events(nc, ns, load)
    faults = _Faults(children, server, out)
    started = time.monotonic()
    stop_at = started + options.duration_s
    give_up_at = stop_at + options.ack_wait_s * 20 + 30
    session_timeout_s = options.ack_wait_s * 10 + 20
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(faults.run(plan, started))
        for _ in range(options.sessions):
            tasks.create_task(_worker(js, ns, load, stop_at, give_up_at, session_timeout_s))
    report = await _judge(js, ns, load, faults.healed, options, public.parent / "audit.key")
    if report.incomplete:
        print("unfinished sessions; consumers:", file=out)
        await _consumers(js, ns, out)
    print(format_report(report, seed=options.seed), file=out, flush=True)
    return (1 if report.violations() else 0), report


async def _judge(
    js: JetStreamContext,
    ns: Namespace,
    load: _Load,
    healed: list[Fault],
    options: ChaosOptions,
    audit_key: Path,
) -> ChaosReport:
    events = await read_stream(js, ns.stream("events"), ns.wildcard("events"), timeout=60)
    decisions = await read_stream(js, ns.stream("events"), ns.wildcard("decisions"), timeout=60)
    history = history_from(
        sorted([*decisions, *events], key=lambda r: r.seq),
        load.roots,
        answering=options.agents,
    )
    audit_records, audit_gaps = await _verify_audit(js, ns, audit_key)
    return check_history(
        history.published,
        history.applied,
        history.sessions,
        stored_ids=history.stored_ids,
        faults=healed,
        end_to_end=history.end_to_end,
        audit_records=audit_records,
        audit_gaps=audit_gaps,
        recovery_bound_s=options.ack_wait_s + 5.0,
    )


async def _verify_audit(
    js: JetStreamContext, ns: Namespace, audit_key: Path
) -> tuple[int | None, list[str]]:
    """Walk the audit chain with the auditor's public key; (None, []) without an auditor."""
    if "auditor" not in ACTORS:
        return None, []
    try:
        pem = await asyncio.to_thread(audit_key.read_bytes)
    except FileNotFoundError:
        return None, []
    private = load_pem_private_key(pem, password=None)
    assert isinstance(private, Ed25519PrivateKey)  # noqa: S101 - demo_topology wrote it
    public = private.public_key()
    report = await verify_stream(js, ns.stream("audit"), trusted={key_id(public): public})
    gaps = [] if report.ok else [f"seq {report.first_bad_seq}: {report.problem}"]
    return report.records, gaps


def _cmd_chaos(args: argparse.Namespace) -> int:
    options = ChaosOptions(
        seed=args.seed,
        duration_s=args.duration,
        sessions=args.sessions,
        ack_wait_s=args.ack_wait,
        server_faults=not args.no_server_faults,
        keep=args.keep,
        policy=args.policy,
    )
    if args.plan:
        with tempfile.TemporaryDirectory(prefix="parley-chaos-plan-") as scratch:
            # demo_topology writes the auditor's key beside the policy key: keep it out of cwd
            topology = demo_topology(Path(scratch) / "policy.pub", "demo")
        names = [spec.name for spec in topology.actor]
        for fault in plan_faults(args.seed, args.duration, names):
            print(fault.describe())
        return 0
    code, _ = asyncio.run(run_chaos(options))
    return code


def add_chaos_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chaos = commands.add_parser(
        "chaos", help="run the demo topology under load and seeded faults; check nothing is lost"
    )
    chaos.add_argument("--seed", type=int, default=1, help="the fault schedule's seed")
    chaos.add_argument("--duration", type=float, default=60.0, help="seconds of load and faults")
    chaos.add_argument("--sessions", type=int, default=4, help="concurrent sessions")
    chaos.add_argument("--ack-wait", type=float, default=2.0, help="actors' ack wait (s)")
    chaos.add_argument(
        "--no-server-faults", action="store_true", help="leave the nats-server alone"
    )
    chaos.add_argument(
        "--policy", type=Path, default=CHAOS_POLICY, help="the bundle source the gate enforces"
    )
    chaos.add_argument("--plan", action="store_true", help="print the schedule and exit")
    chaos.add_argument("--keep", type=Path, help="keep the server store and actor logs here")
    chaos.set_defaults(func=_cmd_chaos)
