"""`parley bench --only otel` runs end to end: the guarded path with tracing off against no
instrumentation at all, Parley's runtime per envelope with tracing off and with spans made,
and a verdict that can fail.

Small counts: the figures are the benchmark's to report, never a test's to bound.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bus import _tracing
from tools.bench import main
from tools.bench._otel import AIM_SHARE, summarise_otel


def test_the_otel_row_measures_both_paths_and_prints_a_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    assert main(["--only", "otel", "--backlog", "50", "--rounds", "1", "--out", str(out)]) == 0
    row = json.loads(out.read_text())["otel"]
    assert 0 < row["guard"]["bare"] and 0 < row["guard"]["guarded"], row
    assert row["off_cpu_us_per_envelope"] > 0, row
    assert row["on_cpu_us_per_envelope"] > 0, row  # the test environment has the otel extra
    assert row["pass"] == (row["guard_share_of_envelope"] < AIM_SHARE), row
    assert _tracing.tracer is None  # the row leaves tracing as it found it: off
    printed = capsys.readouterr().out
    assert "otel: tracing off against no instrumentation at all" in printed
    assert f"aim < {AIM_SHARE:.1%}: {'PASS' if row['pass'] else 'FAIL'}" in printed


def test_the_verdict_fails_when_the_off_path_does_work_or_nothing_was_measured() -> None:
    cheap = {"guarded": 30.0, "bare": 28.0, "added_ns": 2.0}
    assert summarise_otel(cheap, {"off": [100.0], "on": [180.0]})["pass"]
    costly = {"guarded": 1030.0, "bare": 28.0, "added_ns": 1002.0}  # 2 µs of 100 µs
    assert not summarise_otel(costly, {"off": [100.0], "on": [180.0]})["pass"]
    assert not summarise_otel(cheap, {"off": [], "on": []})["pass"]
