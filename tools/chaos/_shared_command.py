"""`parley chaos --shared`: orchestrated sessions across two deployments while a seeded
schedule SIGKILLs what carries them, then the checker's verdict (issue 16).

The run starts the demo's two locked-down deployments and the gateway between them
(tools/_shared_deployments.py), with an auditor on each side, a short ack wait, and the
router's turn timeout short enough that a turn the faults broke ends the session within the
run. It starts every actor itself, as a process it can kill (tools/chaos/_procs.py). N
workers play the person at Alice's terminal: each opens a full_auto session with Bob's
shared agent, follows it to its end and opens the next, until the duration is over; an error
answer to an opening message (the person's deliveries, tools/_refusals.py) is counted and the
worker goes on at once. Every rate in both policies, the person's included, is one the load
cannot reach, so it holds for the whole run, which the checker requires (a session started
in every fault window, tools/chaos/_verdicts.py). The
schedule (tools/chaos/_shared_faults.py, drawn from `--seed`, one fault at a time) SIGKILLs
Alice's relay, Bob's relay, Alice's local agent host, Alice's router or the gateway's
nats-server, and starts it again after a hold. Once every session has ended (or fallen
silent), both deployments' history is read back (tools/chaos/_shared_records.py) and judged
(tools/chaos/_shared_check.py); exit 0 on PASS, 1 on FAIL, 2 when the deployments did not
start.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from bus import ChildProcess, ChildSpec, scratch_directory
from tools._refusals import Refusals
from tools._shared_deployments import (
    Deployment,
    SharedDeployments,
    Tuning,
    prepared_deployments,
)
from tools._shared_sessions import PERSON, Refused, orchestrate
from tools.chaos._procs import actor_process, wait_ready
from tools.chaos._schedule import PlannedFault
from tools.chaos._shared_check import SharedReport, check_shared, format_shared_report
from tools.chaos._shared_faults import SharedFaults, plan_shared_faults
from tools.chaos._shared_records import SHARED_AGENT, audit_key, read_shared_history

__all__ = ("SharedChaosOptions", "run_shared_chaos")

OBJECTIVE: Final = "review this API for security issues"
TURN_TIMEOUT_S: Final = 20.0
"""The router's turn timeout for the run (60 s by default): a fault is held at most 3 s, so a
turn still unanswered after 20 s is one the faults broke, and its session should end."""
STALL_MARGIN_S: Final = 10.0
RATE_PER_MINUTE: Final = 6000
"""Both gates' rate for the run's calls and for the person's opening messages: well above
what back-to-back sessions reach (two workers open about 150 a minute, each of 4 turns), so no
session is refused or ends on a rate limit instead of on what the faults did."""
_REFUSED_PAUSE_S: Final = 0.5


@dataclass(frozen=True)
class SharedChaosOptions:
    """What one `--shared` run does."""

    seed: int = 1
    duration_s: float = 60.0
    sessions: int = 2
    """Concurrent sessions; Alice's gate allows 3 calls to shared agents at once."""
    max_turns: int = 4
    ack_wait_s: float = 2.0
    keep: Path | None = None
    plan: tuple[PlannedFault, ...] | None = None
    """Faults to inject instead of the seed's schedule."""


def _auditor(side: Deployment) -> list[ChildSpec]:
    """The side's auditor, signing with a key made for the run (`audit_key`)."""
    path = Path(audit_key(side))
    path.parent.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    path.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    path.chmod(0o600)
    options = json.dumps({"signing_key": str(path), "tenant": side.name})
    return [ChildSpec(name="auditor", run="auditor", env={"PARLEY_OPTIONS": options})]


async def _worker(
    alice: Deployment, options: SharedChaosOptions, stop_at: float, refusals: Refusals
) -> None:
    """The person at Alice's terminal: one full_auto session after another until `stop_at`,
    each followed to its end, or until it falls silent longer than a turn can take (the
    checker then finds it not ended: the run's verdict, not the worker's), or until its
    opening message is refused (counted in `refusals`; the checker finds the windows no
    session started in)."""
    silence_s = TURN_TIMEOUT_S + STALL_MARGIN_S + 15
    while time.monotonic() < stop_at:
        try:
            async for _ in orchestrate(
                alice, OBJECTIVE, SHARED_AGENT, options.max_turns, silence_s, refusals
            ):
                pass
        except TimeoutError:
            continue
        except Refused:
            await asyncio.sleep(_REFUSED_PAUSE_S)  # pacing: no retry storm against a refusal


def _children(up: SharedDeployments, work: Path) -> dict[str, ChildProcess]:
    """Every actor of both sides as a process the run controls, named `<side>/<actor>`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PARLEY_", "NATS_"))}
    children: dict[str, ChildProcess] = {}
    for side in (up.alice, up.bob):
        assert side.topology is not None  # noqa: S101 - prepared_deployments wrote it
        for spec in side.topology.actor:
            env = {**base, "NATS_URL": side.url, **side.topology.child_env(spec)}
            log = work / f"{side.name}-{spec.name}.log"
            children[f"{side.name}/{spec.name}"] = actor_process(spec.name, spec.run, env, log)
    return children


async def run_shared_chaos(
    options: SharedChaosOptions, out: TextIO = sys.stdout
) -> tuple[int, SharedReport | None]:
    """One `--shared` run; returns the exit code and the checker's report (None: no run)."""
    tuning = Tuning(
        extra_actors=_auditor,
        settings={"ack_wait_s": options.ack_wait_s, "max_deliver": 20},
        router_options={
            "orchestration": {"turn_timeout_s": TURN_TIMEOUT_S},
            "stall_margin_s": STALL_MARGIN_S,
        },
    )
    with scratch_directory("parley-chaos-shared-") as scratch:
        work = options.keep or Path(scratch)
        async with prepared_deployments(work, rate_per_minute=RATE_PER_MINUTE, tuning=tuning) as up:
            children = _children(up, work)
            try:
                return await _run(options, up, children, work, out)
            finally:
                for child in children.values():
                    await asyncio.to_thread(child.stop, 5.0)


async def _run(
    options: SharedChaosOptions,
    up: SharedDeployments,
    children: dict[str, ChildProcess],
    work: Path,
    out: TextIO,
) -> tuple[int, SharedReport | None]:
    print(
        f"parley chaos --shared: Alice's deployment {up.alice.url}, Bob's {up.bob.url}, "
        f"the gateway {up.gateway.url}; each locked down, with an auditor",
        file=out,
        flush=True,
    )
    for child in children.values():
        child.start()
    for name, child in children.items():
        if not await wait_ready(child):
            print(f"parley chaos --shared: {name} did not start; see {work}", file=out)
            return 2, None
    plan = (
        list(options.plan)
        if options.plan is not None
        else plan_shared_faults(options.seed, options.duration_s)
    )
    print(
        f"parley chaos --shared: seed {options.seed}, {options.duration_s:.0f} s, "
        f"{options.sessions} concurrent full_auto sessions of {options.max_turns} turns with "
        f"{SHARED_AGENT}, ack wait {options.ack_wait_s} s, {len(plan)} faults",
        file=out,
        flush=True,
    )
    faults = SharedFaults(children, up.gateway, out)
    refusals = Refusals()
    nc, js = await up.alice.connect_as(PERSON)
    try:
        await refusals.follow(js, up.alice.ns, PERSON)
        started, load_from = time.monotonic(), time.time()
        stop_at = started + options.duration_s
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(faults.run(plan, started))
            for _ in range(options.sessions):
                tasks.create_task(_worker(up.alice, options, stop_at, refusals))
    finally:
        await refusals.close()
        await nc.close()
    load_span = (load_from, load_from + options.duration_s)
    history = await read_shared_history(
        up, faults.healed, load_span, refusals.counts, min_window_s=options.ack_wait_s + 5.0
    )
    report = check_shared(history)
    print(format_shared_report(report, seed=options.seed), file=out, flush=True)
    return (1 if report.violations() else 0), report
