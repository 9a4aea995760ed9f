"""`parley chaos`: the demo topology under load while a seeded schedule breaks it, then the
checker's verdict.

It starts an embedded nats-server with the least-privilege config (one nkey user per actor,
tools/chaos/_lockdown.py; `--open-broker` runs it without users), provisions it as the
provisioner, signs and publishes the demo policy as an operator would, and starts the demo's
actors (gate, router, auditor, the scripted agents) as separate processes it controls, each
with its own settings file. N workers each run collaboration sessions back to back as the
CLI (tools/chaos/_load.py), and with `--delegations M` M more delegate to gpt as the person
(tools/chaos/_delegations.py), gpt fanning out to claude and a third agent, and with
`--tools K` K more have a tool-using agent append lines through the tool runtime, which the
run then starts too (tools/chaos/_tools.py), and with `--llm L` L more have an agent answer
through the LLM gateway, streamed from a slow local provider, the run starting both and
SIGKILLing the gateway on purpose too (tools/chaos/_llm_mix.py), while the schedule
(tools/chaos/_schedule.py, drawn from `--seed`) kills, pauses and restarts chosen actors and
the nats-server itself. After the run it waits for the sessions, delegations, tool steps and
model calls in flight, reads the history back from JetStream (tools/chaos/_records.py),
verifies the audit chain, stops everything, counts the refusals the server logged (and the
tool steps' effects in their workspaces, the provider's streams), prints the checker's table
and the seed, and exits 1 on any violation.

With `--cluster N` the broker is N nodes on loopback (streams at three replicas from three),
and the schedule kills and pauses nodes, one at a time, and on purpose whichever leads
PARLEY_SUBMIT, instead of the single server.

Recovery is measured from the moment a fault was healed (the process started again or
continued) to the next session transition (or answer to the person) JetStream stored, and
bounded by the ack wait plus 5 s (plus `ELECTION_S` on a cluster: after a node's loss the
streams it led elect new leaders only once their election timeout passes). The load goes on
past the run's duration until every planned fault has healed, so each recovery has work after
it to be measured by (the load phase: tools/chaos/_load_phase.py).
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from bus import (
    ChildProcess,
    EmbeddedCluster,
    EmbeddedServer,
    Topology,
    provision,
    scratch_directory,
    shipped,
)
from schemas import Namespace
from tools.chaos._agents import LLM_AGENT, TOOL_AGENT
from tools.chaos._checker import ChaosReport, check_history, format_report
from tools.chaos._connections import connect
from tools.chaos._faults import EVERY_ACTOR
from tools.chaos._keeper import Keeper
from tools.chaos._llm_check import check_llm, model_calls_from
from tools.chaos._llm_mix import Provider, count_from_store, gateway_kills
from tools.chaos._llm_provider import count_streams
from tools.chaos._load import CLI
from tools.chaos._load_phase import LoadMix, Readings, run_load
from tools.chaos._lockdown import LockedBroker, ProvisionFailed
from tools.chaos._procs import actor_process, wait_ready
from tools.chaos._reads import tell_lost
from tools.chaos._schedule import (
    SERVER,
    PlannedFault,
    cluster_targets,
    merged,
    plan_faults,
    router_kills,
)
from tools.chaos._tool_check import check_tools, tool_steps_from
from tools.chaos._tools import count_effects, count_starts
from tools.chaos._topology import GATEWAY, TOOL_RUNTIME, run_topology
from tools.demo import publish_policy
from tools.natsconf import PROVISIONER

__all__ = ("CHAOS_POLICY", "EVERY_ACTOR", "ChaosOptions", "run_chaos")

CHAOS_POLICY = shipped("deploy/policy/chaos.toml")
"""The demo bundle with agent answer rates a run cannot reach (see the file)."""
ELECTION_S = 10.0
"""nats-server's longest raft election timeout (9 s) and a margin."""


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
    kill_router_every_s: float | None = None
    """Also SIGKILL the router this often (faster than a turn's timeout, to prove deadlines
    survive its restarts)."""
    locked_down: bool = True
    """One nkey user per actor with least-privilege permissions (False: a server without
    users, on which every connection may do anything)."""
    delegations: int = 0
    """Workers delegating to gpt as the person, beside the sessions (tools/chaos/_agents.py);
    0 runs the collaboration load alone, with the demo's agents as deployed."""
    cluster: int = 0
    """Nodes of the broker's cluster; 0 runs a single server."""
    tools: int = 0
    """Workers having the toolsmith run tool steps as the person, with the tool runtime
    started among the actors (tools/chaos/_tools.py); 0 runs neither."""
    llm: int = 0
    """Workers delegating to the narrator as the person, its model calls streamed through the
    LLM gateway, which the run starts and kills (tools/chaos/_llm_mix.py); 0 runs neither."""


def _actor_ids(topology: Topology) -> list[str]:
    """Every user the run needs: the topology's actors and the CLI the load submits as."""
    return [*(spec.name for spec in topology.actor), CLI]


async def run_chaos(options: ChaosOptions, out: TextIO = sys.stdout) -> tuple[int, ChaosReport]:
    """One chaos run; returns the exit code and the checker's report."""
    ns = Namespace("parley")
    with scratch_directory("parley-chaos-") as scratch:
        work = options.keep or Path(scratch)
        keys = work / "keys"
        keys.mkdir(parents=True, exist_ok=True)
        provider = Provider(work / "provider.log")
        try:
            url = await provider.start() if options.llm > 0 else ""
            return await _started(options, ns, work, url, provider, out)
        finally:
            await provider.stop()


async def _started(
    options: ChaosOptions, ns: Namespace, work: Path, url: str, provider: Provider, out: TextIO
) -> tuple[int, ChaosReport]:
    """The run once its provider (with the LLM mix) is up: its broker, actors and verdict."""
    # publish_policy writes the public key at this path once the server is up.
    topology = run_topology(
        options.agents,
        options.delegations,
        options.tools,
        work / "keys",
        work,
        llm=options.llm,
        provider_url=url,
    )
    broker = (
        LockedBroker(work / "nats-config", _actor_ids(topology), ns)
        if options.locked_down
        else None
    )
    server = _broker_server(options, work, broker)
    await asyncio.to_thread(server.start)
    children: dict[str, ChildProcess] = {}
    try:
        code, readings = await _run(
            options, ns, work, topology, server, broker, children, out, provider
        )
    finally:
        for child in children.values():
            await asyncio.to_thread(child.stop, 5.0)
        await asyncio.to_thread(server.stop)  # its log is read to the end: every refusal
        await provider.stop()  # every stream it saw is in its log
    if readings is None:
        return code, check_history([], [])
    report = _check(readings, options, broker, work)
    print(format_report(report, seed=options.seed), file=out, flush=True)
    tell_lost(report.lost, readings.history.published, readings.stored, out)
    return (1 if report.violations() else 0), report


def _broker_server(
    options: ChaosOptions, work: Path, broker: LockedBroker | None
) -> EmbeddedServer | EmbeddedCluster:
    """The run's nats-server, or its cluster's nodes, with the run's authorization."""
    authorization = None if broker is None else broker.authorization
    if options.cluster:
        on_node_log = None if broker is None else (lambda _node, line: broker.on_server_log(line))
        return EmbeddedCluster(
            options.cluster, work / "nats", authorization=authorization, on_log=on_node_log
        )
    on_log = None if broker is None else broker.on_server_log
    return EmbeddedServer(work / "nats", authorization=authorization, on_log=on_log)


async def _run(
    options: ChaosOptions,
    ns: Namespace,
    work: Path,
    topology: Topology,
    server: EmbeddedServer | EmbeddedCluster,
    broker: LockedBroker | None,
    children: dict[str, ChildProcess],
    out: TextIO,
    provider: Provider,
) -> tuple[int, Readings | None]:
    base = {
        **os.environ,
        "NATS_URL": server.url,
        "PARLEY_MONITOR_URL": server.monitor_url,
        "PARLEY_ACK_WAIT_S": str(options.ack_wait_s),
        "PARLEY_MAX_DELIVER": "20",  # outlive every fault of the run, and then some
    }
    base.pop("PARLEY_NAMESPACE", None)
    print(
        f"parley chaos: nats-server {server.url}"
        + (f" ({options.cluster}-node cluster), " if options.cluster else ", ")
        + ("least privilege (one nkey user per actor)" if broker else "open broker (no users)"),
        file=out,
        flush=True,
    )
    try:
        await _provision(server.url, ns, broker, base, options.policy, work / "keys")
    except ProvisionFailed as exc:
        print(f"parley chaos: {exc}", file=out)
        return 2, None
    keeper = Keeper(children, out)
    for spec in topology.actor:
        env = {**base, **topology.child_env(spec)}
        args = () if broker is None else ("--config", str(broker.settings_file(spec.name)))
        log_path = work / f"{spec.name}.log"
        children[spec.name] = actor_process(
            spec.name, spec.run, env, log_path, args, keeper.on_exit(spec.name)
        )
        children[spec.name].start()
    for child in children.values():
        if not await wait_ready(child):
            print(f"parley chaos: {child.name} did not start; see {work}", file=out)
            return 2, None
    plan = (
        list(options.plan)
        if options.plan is not None
        else plan_faults(
            options.seed,
            options.duration_s,
            list(children),
            include_server=options.server_faults,
            servers=cluster_targets(options.cluster) if options.cluster else (SERVER,),
        )
    )
    if options.kill_router_every_s is not None:
        plan = merged(plan, router_kills(options.kill_router_every_s, options.duration_s))
    if options.llm > 0 and options.plan is None:
        plan = merged(plan, gateway_kills(options.duration_s))
    print(
        f"parley chaos: seed {options.seed}, {options.duration_s:.0f} s, {options.sessions} "
        f"concurrent sessions, {options.delegations} delegating, {options.tools} using tools, "
        f"{options.llm} through the LLM gateway, "
        f"ack wait {options.ack_wait_s} s, {len(plan)} faults",
        file=out,
        flush=True,
    )
    mix = LoadMix(
        options.duration_s,
        options.ack_wait_s,
        options.sessions,
        options.delegations,
        options.tools,
        options.llm,
    )
    readings = await run_load(
        mix, plan, ns, work, topology, server, broker, children, keeper, provider, out
    )
    return 0, readings


async def _provision(
    url: str,
    ns: Namespace,
    broker: LockedBroker | None,
    env: dict[str, str],
    policy: Path,
    keys: Path,
) -> None:
    """Streams, buckets and the receivers' durables, then the signed policy bundle: the
    provisioner's acts (an operator's) under least privilege."""
    if broker is not None:
        await broker.provision(env)
    admin = await connect(url, broker, PROVISIONER)
    try:
        if broker is None:
            await provision(admin.jetstream(), ns)
        await publish_policy(admin.jetstream(), ns, policy, keys)
    finally:
        await admin.close()


def _check(
    readings: Readings, options: ChaosOptions, broker: LockedBroker | None, work: Path
) -> ChaosReport:
    history = readings.history
    tools = None
    if options.tools > 0:  # counted once every process is stopped: no line is still coming
        steps, refused = tool_steps_from(readings.decisions, TOOL_AGENT)
        starts = count_starts(work / f"{TOOL_RUNTIME}.log")
        tools = check_tools(steps, count_effects(work / "workspaces"), starts, refused)
    llm = None
    if options.llm > 0:
        calls, refused = model_calls_from(readings.decisions, LLM_AGENT)
        streams = count_streams(work / "provider.log")
        llm = check_llm(calls, streams, count_from_store(work / f"{GATEWAY}.log"), refused)
    return check_history(
        history.published,
        history.applied,
        history.sessions,
        stored_ids=history.stored_ids,
        faults=readings.faults,
        end_to_end=history.end_to_end,
        audit_records=readings.audit_records,
        audit_gaps=readings.audit_gaps,
        recovery_bound_s=options.ack_wait_s + 5.0 + (ELECTION_S if options.cluster else 0.0),
        permission_violations=None if broker is None else dict(broker.refused),
        delegations=history.delegations,
        repeats_refused=history.repeats_refused,
        load_span=readings.load.span,
        refusals=readings.load.refusals.counts,
        tools=tools,
        llm=llm,
    )
