"""`parley bench --only scale` times a gate decision in a short and a long trace (issue 35,
item 1), prints each ratio with its aim and a verdict, and the verdicts can fail.

Small sizes: the times are the bench's to judge on 10,000 envelopes, never a test's. The
bytes of the records a decision reads and writes are exact, though: their ratio must pass
at any size, or a record grows with its trace again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench import main
from tools.bench._scale_decisions import AIM_RATIO, _Sample, summarise_decisions


def test_the_scale_row_decides_in_a_short_and_a_long_trace_and_prints_verdicts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = ["--only", "scale", "--scale-audit-records", "500", "--out", str(out)]
    argv += ["--scale-overhead-rounds", "0"]  # the overhead figures have a test of their own
    argv += ["--scale-agents", "20", "--scale-agents-window-s", "1", "--scale-sessions", "0"]
    assert main([*argv, "--scale-decisions-trace", "400", "--scale-decisions-pairs", "25"]) == 0
    decisions = json.loads(out.read_text())["scale"]["decisions"]
    assert decisions["sizes"]["short"] == 10 and decisions["sizes"]["long_built"] >= 400
    assert decisions["decisions"] == {"short": 50, "long": 50}, decisions
    for size in ("short", "long"):
        assert decisions[size]["p50_us"] > 0 and decisions[size]["written_bytes"] > 0, decisions
    assert decisions["pass"]["read_bytes"] and decisions["pass"]["written_bytes"], decisions
    printed = capsys.readouterr().out
    lines = [line for line in printed.splitlines() if "long trace / short" in line]
    assert len(lines) == 4, printed
    assert all(f"aim <= {AIM_RATIO:g}x" in line for line in lines), printed
    assert all(line.rstrip().endswith(("PASS", "FAIL")) for line in lines), printed


def _samples(seconds: float, read: int, written: int) -> list[_Sample]:
    return [_Sample(seconds * (1 + i / 100), read, written) for i in range(100)]


def test_a_decision_that_grows_with_its_trace_fails_the_figure() -> None:
    short = _samples(20e-6, 600, 240)
    flat = summarise_decisions(10, 10_000, short, _samples(25e-6, 640, 250), built_envelopes=10_001)
    assert all(flat["pass"].values()), flat
    grown = summarise_decisions(
        10, 10_000, short, _samples(1.2e-3, 775_000, 775_000), built_envelopes=10_001
    )
    assert not any(grown["pass"].values()), grown
    unmeasured = summarise_decisions(10, 10_000, [], [], built_envelopes=0)
    assert not any(unmeasured["pass"].values()), unmeasured
