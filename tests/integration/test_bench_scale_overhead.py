"""`parley bench --only scale` measures what Parley adds over the stores its guarantees make
(issue 35, item 2): a `say` against the guarded path and the gate against the guarded relay,
at both fsync settings, each printed with its aim and verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench import main


def test_the_scale_row_prints_the_overhead_over_the_guarded_references(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = ["--only", "scale", "--scale-audit-records", "500", "--out", str(out)]
    argv += ["--scale-agents", "20", "--scale-agents-window-s", "1", "--scale-sessions", "0"]
    argv += ["--scale-decisions-trace", "200", "--scale-decisions-pairs", "25"]
    argv += ["--scale-overhead-rounds", "1", "--backlog", "300", "--count", "20"]
    assert main([*argv, "--calls", "10"]) == 0
    figures = json.loads(out.read_text())["scale"]["overhead"]["figures"]
    assert [f["what"] for f in figures] == [
        "a `say`'s p50 / the guarded path's",
        "gate throughput / guarded relay, fsync always",
        "gate added p50 / guarded relay, fsync always",
        "gate throughput / guarded relay, fsync lazy",
        "gate added p50 / guarded relay, fsync lazy",
    ]
    assert all(f["ratio"] > 0 for f in figures), figures  # every figure measured
    printed = capsys.readouterr().out
    assert "what Parley adds over the stores its guarantees make" in printed, printed
    # The audit's two, the registry's, the decisions' four and the five overhead figures.
    assert printed.count("PASS") + printed.count("FAIL") == 12, printed
