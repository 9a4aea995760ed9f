"""`parley bench --only scale` measures registered agents beating into a real registry, read
by real gate and router processes, and its verdict on their CPU can fail.

A few hundred agents over a short window (the aim is the bench's to judge at 10,000): every
beat due is stored, the bucket holds each agent's profile and heartbeat, the CPU of every
process is read from /proc, and an aim set below what was measured fails the figure.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench import main
from tools.bench._scale_agents import READERS

_AGENTS = 300


def test_the_scale_row_beats_for_every_agent_and_prints_the_cpu_with_its_aim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = ["--only", "scale", "--scale-audit-records", "500", "--out", str(out)]
    argv += ["--scale-overhead-rounds", "0"]  # the overhead figures have a test of their own
    argv += ["--scale-agents", str(_AGENTS), "--scale-agents-window-s", "2"]
    argv += ["--scale-decisions-trace", "200", "--scale-decisions-pairs", "50"]
    argv += ["--scale-sessions", "0"]  # the sessions' figure has a test of its own
    assert main(argv) == 0
    (run,) = json.loads(out.read_text())["scale"]["registry"]
    assert run["sync_always"] and run["agents"] == _AGENTS, run
    assert run["kept_up"] and run["puts_failed"] == 0, run
    # Every beat due in the window was stored, at the real period's rate.
    assert run["beats_stored_per_s"] >= 0.95 * _AGENTS / run["heartbeat_s"], run
    # A profile and a heartbeat per agent, plus the readers' own heartbeats.
    assert run["registry_messages"] == 2 * _AGENTS + len(READERS), run
    assert set(run["core_pct"]) == {*READERS, "nats-server"}, run
    assert run["core_pct"]["nats-server"] > 0, run  # it stored the beats: it spent CPU
    assert run["pass"] == {"total_core_pct": True}, run  # 60 beats/s: far under the aim
    printed = capsys.readouterr().out
    assert f"{_AGENTS:,} agents registered" in printed and "aim < 10%" in printed, printed
    # Audit verify's two, the agents' CPU, and the decisions' four ratios (tested on their own).
    assert printed.count("PASS") + printed.count("FAIL") == 7, printed


def test_an_aim_below_what_is_measured_fails_the_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = ["--only", "scale", "--scale-audit-records", "500", "--out", str(out)]
    argv += ["--scale-overhead-rounds", "0"]  # the overhead figures have a test of their own
    argv += ["--scale-agents", str(_AGENTS), "--scale-agents-window-s", "2"]
    argv += ["--scale-decisions-trace", "200", "--scale-decisions-pairs", "50"]
    argv += ["--scale-sessions", "0"]
    assert main([*argv, "--scale-agents-aim-pct", "0.0"]) == 0
    (run,) = json.loads(out.read_text())["scale"]["registry"]
    # Measured as ever (every beat stored, CPU spent), judged against an aim below it.
    assert run["kept_up"] and run["total_core_pct"] > 0, run
    assert run["aims"] == {"total_core_pct": 0.0} and run["pass"] == {"total_core_pct": False}
    assert "aim < 0%" in capsys.readouterr().out
