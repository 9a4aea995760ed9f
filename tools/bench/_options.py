"""`parley bench`'s options: a run that ends within minutes by default, the sweeps on request.

Every row compares paths in the same run, so a smaller run keeps its ratios meaningful and
only widens their spread. The defaults are sized so that `parley bench` with no flags ends
within five minutes on a 2-core machine; `--full` restores the long sweeps the figures in
docs/benchmarks.md were measured with (the latency row alone, 500 calls after each of 0, 1, 5
and 30 s of idling on three paths, takes over eight hours). Any option given explicitly wins
over both.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Final

__all__ = ("FULL", "QUICK", "ROWS", "bench_parser", "resolve")

ROWS: Final = (
    "runtime",
    "gate",
    "collab",
    "audit",
    "latency",
    "relay",
    "publish",
    "context",
    "scale",
    "tools",
    "llm",
    "otel",
)
"""Every row, in the order a run without `--only` takes them."""

QUICK: Final[dict[str, int | float | str]] = {
    "count": 200,
    "backlog": 2000,
    "rounds": 2,
    "audit_backlog": 2000,
    "collab_sessions": "1,10",
    "collab_rounds": 6,
    "collab_min_rounds": 60,
    "calls": 100,
    "gaps": "0",
    "relay_backlog": 500,
    "relay_calls": 60,
    "relay_turns": 4,
    "publish_batches": 100,
    "scale_audit_records": 100_000,
    "scale_agents": 1000,
    "scale_agents_window_s": 5.0,
    "scale_agents_fsync": "always",
    "scale_agents_aim_pct": 10.0,
    "scale_decisions_trace": 10_000,
    "scale_decisions_pairs": 2000,
    "scale_sessions": 100,
    "scale_sessions_few": 10,
    "scale_overhead_rounds": 2,
    "tool_calls": 100,
    "llm_calls": 10,
}
"""The defaults: every row, small enough to end within minutes."""

FULL: Final[dict[str, int | float | str]] = {
    "count": 500,
    "backlog": 5000,
    "rounds": 4,
    "audit_backlog": 5000,
    "collab_sessions": "1,10,100",
    "collab_rounds": 6,
    "collab_min_rounds": 300,
    "calls": 500,
    "gaps": "0,1,5,30",
    "relay_backlog": 2000,
    "relay_calls": 200,
    "relay_turns": 8,
    "publish_batches": 300,
    "scale_audit_records": 1_000_000,
    "scale_agents": 10_000,
    "scale_agents_window_s": 20.0,
    "scale_agents_fsync": "always,lazy",
    "scale_agents_aim_pct": 10.0,
    "scale_decisions_trace": 10_000,
    "scale_decisions_pairs": 5000,
    "scale_sessions": 1000,
    "scale_sessions_few": 10,
    "scale_overhead_rounds": 4,
    "tool_calls": 1000,
    "llm_calls": 50,
}
"""`--full`: the sweeps behind docs/benchmarks.md (hours, for the latency row's long gaps)."""

_HELP: Final = {
    "count": "latency samples per run",
    "backlog": "envelopes per throughput run",
    "rounds": "alternating raw/Parley runs",
    "audit_backlog": "facts per audit run (0: skip the row)",
    "collab_sessions": "concurrent sessions per collab row",
    "collab_rounds": "rounds per session",
    "collab_min_rounds": "rounds measured per collab row",
    "calls": "sequential `say` calls per idle gap (latency)",
    "gaps": "idle gaps between latency calls, in seconds",
    "relay_backlog": "calls per relay throughput run",
    "relay_calls": "one-at-a-time calls per relay run",
    "relay_turns": "turns per orchestrated session (relay)",
    "publish_batches": "batches of 64 per publish-mode run",
    "scale_audit_records": "records `parley audit verify` walks (scale)",
    "scale_agents": "registered agents beating into the registry (scale)",
    "scale_agents_window_s": "seconds the agents' CPU is measured over (scale)",
    "scale_agents_fsync": "server fsync settings the agents run under (scale)",
    "scale_agents_aim_pct": "aim for the agents' readers and server, %% of one core (scale)",
    "scale_decisions_trace": "envelopes in the long trace decisions are timed on (scale)",
    "scale_decisions_pairs": "calls and answers decided at each trace size (scale)",
    "scale_sessions": "collaborations at once whose agents think 1-3 s (scale; 0: skip)",
    "scale_sessions_few": "collaborations at once the many are compared with (scale)",
    "scale_overhead_rounds": "gate runs against the guarded relay, each fsync (scale; 0: skip)",
    "tool_calls": "sequential 4 KiB File.Read calls per path and round (tools)",
    "llm_calls": "sequential streamed model calls per path and round (llm)",
}


def bench_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parley bench", description=description)
    for name, quick in QUICK.items():
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=type(quick),
            default=None,
            help=f"{_HELP[name]} (default {quick}; --full: {FULL[name]})",
        )
    parser.add_argument(
        "--full",
        action="store_true",
        help="the long sweeps of docs/benchmarks.md instead of the quick defaults (hours)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench-results/bench.json"))
    parser.add_argument(
        "--only",
        choices=ROWS,
        help="run only this row (default: all); `tools`: a 4 KiB File.Read through the gate "
        "and the tool runtime against raw nats-py request/reply; `llm`: a streamed model call "
        "through the gate and the LLM gateway against a client reading the provider directly",
    )
    return parser


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill every option not given from the chosen profile (quick, or `--full`)."""
    profile = FULL if args.full else QUICK
    for name, value in profile.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args
