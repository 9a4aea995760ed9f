"""The scale row's overhead verdicts (tools/bench/_scale_overhead.py), on hand-made figures:
each ratio is judged against its aim, so a gate slower than its guarded reference fails."""

from __future__ import annotations

from typing import Any

from tools.bench._scale_overhead import overhead_figures


def _gate(throughput: float, added_p50: float) -> dict[str, Any]:
    over = {"throughput": throughput, "added_p50": added_p50, "added_p99": 1.0}
    return {fsync: {"over_floor": over} for fsync in ("always", "lazy")}


def _latency(parley_ms: float, guarded_ms: float) -> list[dict[str, Any]]:
    return [
        {"gap_s": 0.0, "path": "guarded", "p50_ms": guarded_ms},
        {"gap_s": 0.0, "path": "parley", "p50_ms": parley_ms},
        {"gap_s": 1.0, "path": "parley", "p50_ms": 1000.0},  # another gap is not judged
    ]


def test_figures_within_their_aims_pass() -> None:
    figures = overhead_figures(_gate(1.02, 1.1), _latency(12.0, 10.0))
    assert [f["pass"] for f in figures] == [True] * 5
    assert [round(f["ratio"], 2) for f in figures] == [1.2, 1.02, 1.1, 1.02, 1.1]
    assert [f["aim"] for f in figures] == ["<= 1.25x", ">= 1x", "<= 1.2x", ">= 1x", "<= 1.2x"]


def test_figures_past_their_aims_fail() -> None:
    figures = overhead_figures(_gate(0.86, 1.29), _latency(16.0, 10.0))
    assert [f["pass"] for f in figures] == [False] * 5
