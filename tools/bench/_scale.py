"""The `scale` row of `parley bench`: whether Parley's cost stays flat as the work grows.

Each figure is printed with its aim and PASS or FAIL (a figure that was not measured, or a
run whose result is wrong, fails). The row holds:

- `audit_verify` (tools/bench/_scale_audit.py): `parley audit verify` over a long chain,
  records per second and the verifying process's peak resident memory.
- `registry` (tools/bench/_scale_agents.py): many registered agents beating into the
  registry at the real heartbeat period; the CPU of its readers and the nats-server, for
  each fsync setting asked for.
- `decisions` (tools/bench/_scale_decisions.py): a gate decision's p50 and p99 in a trace of
  10 envelopes and in a long one, their ratio, and the bytes of the records it reads and
  writes at both sizes.
- `sessions` (tools/bench/_scale_sessions.py): a thousand collaborations at once whose agents
  think 1-3 s, all of which must complete, Parley's added time per turn against a few at
  once, and the resident memory per session of the router, the gate and the agent hosts.
- `overhead` (tools/bench/_scale_overhead.py): what Parley adds over the stores its
  guarantees make: a `say`'s p50 over the guarded path's, the gate's throughput and added
  p50 over the guarded relay's at both fsync settings.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import uvloop

from tools.bench._scale_agents import registry_scale
from tools.bench._scale_audit import AIM_MAX_RSS_MB, AIM_RECORDS_PER_S, audit_verify_scale
from tools.bench._scale_decisions import decision_scale, print_decisions
from tools.bench._scale_overhead import overhead_scale, print_overhead
from tools.bench._scale_sessions import print_sessions, sessions_scale

__all__ = (
    "DecisionOptions",
    "RegistryOptions",
    "decision_options",
    "print_scale",
    "registry_options",
    "scale_from",
    "scale_rows",
)

SHORT_TRACE = 10
"""Envelopes in the short trace a decision's cost is compared with."""


@dataclass(frozen=True)
class RegistryOptions:
    """The registry figure's options: agents, window, fsync settings, aim."""

    agents: int
    window_s: float
    fsyncs: tuple[str, ...]
    aim_pct: float


def registry_options(args: argparse.Namespace) -> RegistryOptions:
    """The registry figure's options from `parley bench`'s resolved arguments."""
    fsyncs = tuple(f for f in args.scale_agents_fsync.split(",") if f)
    unknown = set(fsyncs) - {"always", "lazy"}
    if unknown:
        raise SystemExit(f"--scale-agents-fsync: not always or lazy: {sorted(unknown)}")
    return RegistryOptions(
        args.scale_agents, args.scale_agents_window_s, fsyncs, args.scale_agents_aim_pct
    )


@dataclass(frozen=True)
class DecisionOptions:
    """The decisions figure's options: the long trace's envelopes, calls and answers timed."""

    trace: int
    pairs: int


def decision_options(args: argparse.Namespace) -> DecisionOptions:
    """The decisions figure's options from `parley bench`'s resolved arguments."""
    if args.scale_decisions_trace <= SHORT_TRACE or args.scale_decisions_pairs < 1:
        raise SystemExit(
            f"--scale-decisions-trace must pass {SHORT_TRACE}, --scale-decisions-pairs 0"
        )
    return DecisionOptions(args.scale_decisions_trace, args.scale_decisions_pairs)


async def scale_rows(
    audit_records: int,
    registry: RegistryOptions,
    decisions: DecisionOptions,
    sessions: tuple[int, int] = (0, 0),
) -> dict[str, Any]:
    """Run every figure of the row; `audit_records`: records the verify walks; `sessions`:
    the few and the many thinking collaborations at once (many 0: not run)."""
    result: dict[str, Any] = {
        "decisions": decision_scale(SHORT_TRACE, decisions.trace, decisions.pairs),
        "audit_verify": await audit_verify_scale(audit_records),
    }
    result["registry"] = [
        await registry_scale(
            registry.agents,
            registry.window_s,
            aim_pct=registry.aim_pct,
            sync_always=fsync == "always",
        )
        for fsync in registry.fsyncs
    ]
    few, many = sessions
    if many > 0:
        result["sessions"] = await sessions_scale(few, many)
    return result


def scale_step(args: argparse.Namespace, result: dict[str, Any]) -> tuple[str, Callable[[], None]]:
    """The row as `parley bench` runs it: what it measures with these options, and the run.
    The overhead figures take the gate and latency rows' results from `result` when those
    rows ran first in this invocation."""

    def run() -> None:
        scale = result["scale"] = uvloop.run(scale_from(args))
        if args.scale_overhead_rounds > 0:
            overhead = overhead_scale(
                args.scale_overhead_rounds,
                args.count,
                args.backlog,
                args.calls,
                gate=result.get("gate"),
                latency=result.get("latency"),
            )
            scale["overhead"] = uvloop.run(overhead)
        print_scale(scale)

    what = (
        f"scale: audit verify of {args.scale_audit_records:,} records, "
        f"{args.scale_agents:,} agents' heartbeats, decisions in a trace of "
        f"{args.scale_decisions_trace:,}, {args.scale_sessions:,} thinking sessions"
    )
    return what, run


async def scale_from(args: argparse.Namespace) -> dict[str, Any]:
    """The whole row with `parley bench`'s resolved arguments."""
    return await scale_rows(
        args.scale_audit_records,
        registry_options(args),
        decision_options(args),
        (args.scale_sessions_few, args.scale_sessions),
    )


def _verdict(what: str, figure: str, aim: str, passed: bool) -> None:
    print(f"  {what:<44} {figure:>14}   aim {aim:<12} {'PASS' if passed else 'FAIL'}")


def print_scale(result: dict[str, Any]) -> None:
    """Print each figure of the row with its aim and verdict."""
    print_decisions(result["decisions"], _verdict)
    audit = result["audit_verify"]
    print(
        f"\nscale: `parley audit verify --strict` over {audit['records']:,} records "
        f"(a signed checkpoint every 1,000), as a child process"
    )
    if not audit["chain_verified"]:
        print("  the verify did not report every record written in an intact chain:")
        print("    " + audit["verify_output"].strip().replace("\n", "\n    "))
    _verdict(
        "records verified per second (spawn to exit)",
        f"{audit['records_per_s']:,.0f}",
        f">= {AIM_RECORDS_PER_S:,.0f}",
        audit["pass"]["records_per_s"],
    )
    _verdict(
        "peak resident memory of the verify (wait4)",
        f"{audit['peak_rss_mb']:.0f} MB",
        f"< {AIM_MAX_RSS_MB:.0f} MB",
        audit["pass"]["peak_rss_mb"],
    )
    print(
        f"  (its CPU: {audit['verify_cpu_us_per_record']:.1f} us a record, "
        f"{audit['verify_wall_s']:.1f} s wall; writing the chain took {audit['write_s']:.1f} s)"
    )
    for run in result["registry"]:
        _print_registry(run)
    if "sessions" in result:
        print_sessions(result["sessions"], _verdict)
    if "overhead" in result:
        print_overhead(result["overhead"], _verdict)


def _print_registry(run: dict[str, Any]) -> None:
    fsync = "always" if run["sync_always"] else "lazy"
    print(
        f"\nscale: {run['agents']:,} agents registered, each beating every "
        f"{run['heartbeat_s']:g} s (fsync {fsync}); CPU over {run['window_s']:g} s"
    )
    print(
        f"  beats stored {run['beats_stored_per_s']:,.0f}/s of {run['beats_due_per_s']:,.0f}/s "
        f"due, {run['puts_failed']:,} puts failed"
        + (f" (last: {run['last_error']})" if run["puts_failed"] else "")
    )
    for name, pct in run["core_pct"].items():
        print(
            f"    {name:<12} {pct:5.1f}% of a core beating, {run['idle_core_pct'][name]:4.1f}% idle"
        )
    if not run["kept_up"]:
        print("  the beats due were not all stored: not a measurement of these agents")
    _verdict(
        "readers + nats-server, % of one core",
        f"{run['total_core_pct']:.1f}%",
        f"< {run['aims']['total_core_pct']:g}%",
        run["pass"]["total_core_pct"],
    )
