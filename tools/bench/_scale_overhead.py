"""The scale row's overhead figures: what Parley adds over the stores its guarantees make.

Issue 35 states these aims against the guarded references, raw nats-py making the same
fsynced stores in the same order (docs/benchmarks.md, "The floor: raw nats-py making the
gate's stores" and "The floor: the guarded path"), each measured in the same run:

- a `say`'s p50 over the guarded path's (the latency row, at no idle gap): at most 1.25x;
- the gate's throughput over the guarded relay's, with fsync always and lazy: at least 1.0x;
- the gate's added p50 over the guarded relay's, with both settings: at most 1.2x.

The figures come from the gate and latency rows' own runs (tools/bench/_gate.py,
tools/bench/_latency.py): when `parley bench` ran those rows in this invocation their results
are used, else they are run here with the invocation's `--backlog`, `--count`, `--calls` and
`--scale-overhead-rounds` (0 skips the figures).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any, Final

from tools.bench._gate import gate_rounds, summarise_gate
from tools.bench._latency import latency_rows

__all__ = (
    "AIM_GATE_ADDED_P50",
    "AIM_GATE_THROUGHPUT",
    "AIM_SAY_P50",
    "overhead_figures",
    "overhead_scale",
    "print_overhead",
)

AIM_SAY_P50: Final = 1.25
"""Most a `say`'s p50 may be over the guarded path's."""
AIM_GATE_THROUGHPUT: Final = 1.0
"""Least the gate's throughput may be of the guarded relay's, at each fsync setting."""
AIM_GATE_ADDED_P50: Final = 1.2
"""Most the gate's added p50 may be over the guarded relay's, at each fsync setting."""

Verdict = Callable[[str, str, str, bool], None]


async def overhead_scale(
    rounds: int,
    count: int,
    backlog: int,
    calls: int,
    *,
    gate: dict[str, Any] | None = None,
    latency: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The gate's summaries at both fsync settings and the latency rows at no gap: `gate`
    and `latency` when given (the rows' own results), else measured now."""
    if gate is None:
        runs: list[dict[str, Any]] = []
        for sync_always in (True, False):
            runs += await gate_rounds(sync_always, count, backlog, rounds)
        gate = {fsync: summarise_gate(runs, fsync) for fsync in ("always", "lazy")}
    if latency is None or not any(row["gap_s"] == 0 for row in latency):
        latency = [asdict(row) for row in await latency_rows([0.0], calls)]
    return {"figures": overhead_figures(gate, latency)}


def overhead_figures(gate: dict[str, Any], latency: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each figure with its aim and verdict, from the gate's summaries and the latency rows."""
    at_zero = {row["path"]: row for row in latency if row["gap_s"] == 0}
    say = at_zero["parley"]["p50_ms"] / at_zero["guarded"]["p50_ms"]
    figures = [_figure("a `say`'s p50 / the guarded path's", say, "<=", AIM_SAY_P50)]
    for fsync in ("always", "lazy"):
        over = gate[fsync]["over_floor"]
        figures += [
            _figure(
                f"gate throughput / guarded relay, fsync {fsync}",
                over["throughput"],
                ">=",
                AIM_GATE_THROUGHPUT,
            ),
            _figure(
                f"gate added p50 / guarded relay, fsync {fsync}",
                over["added_p50"],
                "<=",
                AIM_GATE_ADDED_P50,
            ),
        ]
    return figures


def _figure(what: str, ratio: float, sense: str, aim: float) -> dict[str, Any]:
    passed = ratio >= aim if sense == ">=" else ratio <= aim
    return {"what": what, "ratio": ratio, "aim": f"{sense} {aim:g}x", "pass": passed}


def print_overhead(result: dict[str, Any], verdict: Verdict) -> None:
    """Print each overhead figure with its aim and verdict."""
    print("\nscale: what Parley adds over the stores its guarantees make (same run, guarded refs)")
    for figure in result["figures"]:
        verdict(figure["what"], f"{figure['ratio']:.2f}x", figure["aim"], figure["pass"])
