"""A chaos run's load phase: the workers beside the fault schedule, then the history read back.

Once the actors are up, the run follows the timeline and the gate's decisions on an
operator's connection, starts the schedule and the workers of every mix, and lets them run
until the load's end (tools/chaos/_load.py `LoadEnd`: the planned duration, and every planned
fault healed). It then waits for the tool steps and model calls in flight and for every
actor's consumer to fall quiet (tools/chaos/_reads.py), reads the decisions and events back
from JetStream, verifies the audit chain, and tells what stayed unfinished, all while the
broker is still up: what the checker judges once every process is stopped.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from bus import ChildProcess, EmbeddedCluster, EmbeddedServer, Topology
from schemas import Decision, Namespace
from tools.chaos._agents import LLM_AGENT
from tools.chaos._checker import Fault
from tools.chaos._connections import connect, verify_audit
from tools.chaos._delegations import DEADLINE_MS, MARGIN_S, delegation_worker, follow_answers
from tools.chaos._faults import Faults
from tools.chaos._keeper import Keeper
from tools.chaos._llm_mix import Provider, llm_request
from tools.chaos._load import CLI, Load, LoadEnd, follow_events, follow_refusals, worker
from tools.chaos._lockdown import LockedBroker
from tools.chaos._reads import Stored, read_stream, tell_unfinished, wait_for_quiet
from tools.chaos._records import History, history_from
from tools.chaos._schedule import PlannedFault
from tools.chaos._tools import ToolSteps, tool_request
from tools.natsconf import PROVISIONER

__all__ = ("LoadMix", "Readings", "run_load")


@dataclass(frozen=True)
class LoadMix:
    """How many workers of each kind, how long, and the ack wait the run's bounds follow."""

    duration_s: float
    ack_wait_s: float
    sessions: int
    delegations: int
    tools: int
    llm: int


@dataclass
class Readings:
    """What the checker read from the streams while the server was still up."""

    history: History
    faults: list[Fault]
    audit_records: int | None
    audit_gaps: list[str]
    load: Load
    decisions: list[Decision]
    """The gate's decisions, for the tool and LLM mixes' verdicts."""
    stored: list[Stored]
    """Every decision and session event, in stream order: what became of a lost message."""


async def run_load(
    mix: LoadMix,
    plan: list[PlannedFault],
    ns: Namespace,
    work: Path,
    topology: Topology,
    server: EmbeddedServer | EmbeddedCluster,
    broker: LockedBroker | None,
    children: dict[str, ChildProcess],
    keeper: Keeper,
    provider: Provider,
    out: TextIO,
) -> Readings:
    """Run the load beside the schedule, then read back what the checker judges."""
    nc = await connect(server.url, broker, CLI)
    watcher = await connect(server.url, broker, PROVISIONER)  # the whole timeline, durably
    session_timeout_s = mix.ack_wait_s * 10 + 20
    load = Load()
    try:
        js = nc.jetstream()
        await follow_events(watcher.jetstream(), ns, load)
        await follow_refusals(nc, ns, load, locked_down=broker is not None)
        if mix.delegations > 0 or mix.tools > 0 or mix.llm > 0:
            await follow_answers(watcher.jetstream(), ns, load)
        steps = ToolSteps()
        if mix.tools > 0:
            await steps.follow(watcher.jetstream(), ns)
        calls = ToolSteps(LLM_AGENT, "llm_request", "llm_response")
        if mix.llm > 0:
            await calls.follow(watcher.jetstream(), ns)
        faults = Faults(children, server, out, ns.stream("submit"), keeper, provider.before_fault)
        started = time.monotonic()
        stop_at = started + mix.duration_s
        end = LoadEnd(planned_at=stop_at, give_up_at=stop_at + mix.ack_wait_s * 20 + 30)
        began = time.time()
        async with asyncio.TaskGroup() as tasks:
            keeping = tasks.create_task(keeper.run())
            running = [tasks.create_task(_faults_then_healed(faults, plan, started, end))]
            running += [
                tasks.create_task(worker(js, ns, load, end, session_timeout_s))
                for _ in range(mix.sessions)
            ]
            running += [
                tasks.create_task(delegation_worker(js, ns, load, end))
                for _ in range(mix.delegations)
            ]
            running += [
                tasks.create_task(delegation_worker(js, ns, load, end, tool_request))
                for _ in range(mix.tools)
            ]
            running += [
                tasks.create_task(delegation_worker(js, ns, load, end, llm_request))
                for _ in range(mix.llm)
            ]
            await asyncio.gather(*running)
            load.span = (began, end.ended_at or time.time())
            settled_by = min(end.give_up_at, time.monotonic() + session_timeout_s)
            await steps.settle(settled_by)
            await calls.settle(settled_by)
            keeping.cancel()  # the load is done: exits from here on are the run's own stop
        print(keeper.summary(), file=out, flush=True)
    finally:
        await load.refusals.close()
        await nc.close()
        await watcher.close()
    return await _read_back(
        ns, work, topology, server, broker, load, faults.healed, session_timeout_s, out
    )


async def _faults_then_healed(
    faults: Faults, plan: list[PlannedFault], started: float, end: LoadEnd
) -> None:
    """Apply the schedule, then let the load end (it goes on until every fault healed)."""
    await faults.run(plan, started)
    end.faults_healed.set()


async def _read_back(
    ns: Namespace,
    work: Path,
    topology: Topology,
    server: EmbeddedServer | EmbeddedCluster,
    broker: LockedBroker | None,
    load: Load,
    healed: list[Fault],
    session_timeout_s: float,
    out: TextIO,
) -> Readings:
    """Once every actor's consumer is quiet: the decisions and events, the audit chain, and
    what stayed unfinished told."""
    # The whole timeline is an operator's to read: a person's account sees it only live.
    admin = await connect(server.url, broker, PROVISIONER)
    try:
        actors = [spec.name for spec in topology.actor]  # not the load's own `cli`
        await wait_for_quiet(admin, ns, actors, session_timeout_s, out)
        js = admin.jetstream()
        events = await read_stream(js, ns.stream("events"), ns.wildcard("events"), timeout=60)
        decisions = await read_stream(js, ns.stream("events"), ns.wildcard("decisions"), timeout=60)
    finally:
        await admin.close()
    stored = sorted([*decisions, *events], key=lambda r: r.seq)
    history = history_from(
        stored,
        load.roots,
        answering=[spec.name for spec in topology.actor if spec.run == "agent"],
        people=[CLI],
        delegation_bound_s=DEADLINE_MS / 1000 + MARGIN_S,
    )
    records, gaps = await verify_audit(server.url, broker, ns, work / "keys" / "audit.key")
    unanswered = [d.request_id for d in history.delegations if d.answer is None]
    if unanswered or any(not session.ended for session in history.sessions):
        await tell_unfinished(server.url, broker, ns, unanswered, decisions, out)
    gate_decisions = [r.envelope for r in decisions if isinstance(r.envelope, Decision)]
    return Readings(history, healed, records, gaps, load, gate_decisions, stored)
