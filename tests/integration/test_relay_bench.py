"""`parley bench --only relay` runs end to end: both relays forward the whole backlog and
every one-at-a-time call, over a real gateway, as real processes; and orchestrated sessions
run on two locked-down deployments, to a shared agent on Alice's own and to Bob's.

The figures themselves are the benchmark's to report, not a test's to bound.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench import main


def test_the_relay_row_times_both_relays_over_the_same_gateway(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = ["--only", "relay", "--relay-backlog", "20", "--relay-calls", "3", "--rounds", "1"]
    assert main([*argv, "--relay-turns", "2", "--out", str(out)]) == 0
    relay = json.loads(out.read_text())["relay"]
    rows = relay["forwards"]
    assert [(row["path"], row["forwards"], row["calls"]) for row in rows] == [
        ("raw", 20, 3),
        ("parley", 20, 3),
    ]
    assert all(row["forwards_per_s"] > 0 and 0 < row["p50_ms"] <= row["p99_ms"] for row in rows)
    turns = relay["turns"]
    assert [(row["path"], row["turns"]) for row in turns] == [
        ("one deployment", 2),
        ("over the relay", 2),
    ]
    assert all(0 < row["p50_ms"] <= row["p99_ms"] for row in turns)
    assert "added by the relay" in capsys.readouterr().out
