"""`parley bench --only latency` runs end to end: the three paths at each gap (raw nats-py, raw
nats-py storing what Parley's guarantees store, Parley), every call answered.

Real processes on a real server, as the benchmark runs them; the figures themselves are the
benchmark's to report, not a test's to bound.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench import main


def test_the_latency_row_times_each_call_of_the_three_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    assert main(["--only", "latency", "--calls", "3", "--gaps", "0", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["latency"]
    assert [(row["gap_s"], row["path"], row["calls"]) for row in rows] == [
        (0.0, "raw", 3),
        (0.0, "guarded", 3),
        (0.0, "parley", 3),
    ]
    assert all(0 < row["p50_ms"] <= row["max_ms"] for row in rows)
    # The CPU the processes spent, the server's share in it (read in 10 ms ticks: the raw
    # path's three calls may read 0); Parley's three calls take tens of milliseconds of it.
    assert all(0 <= row["server_cpu_ms"] <= row["cpu_ms"] for row in rows)
    assert rows[2]["cpu_ms"] > 0
    printed = capsys.readouterr().out
    assert "p50" in printed and "x guarded" in printed
