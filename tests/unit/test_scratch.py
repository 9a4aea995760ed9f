"""Scratch directories of killed runs are removed by the next run (bus/_scratch.py).

A SIGKILLed demo, chaos run or benchmark never reached its own removal and left its store
behind for ever. The process ids here are real: one of a process that has ended, one of
this test's own process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bus import abandoned_scratch, scratch_directory


def _ended_pid() -> int:
    """The id of a process that ran and has ended (reaped: no process has it now)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


def test_only_the_directories_of_ended_processes_are_abandoned(tmp_path: Path) -> None:
    ended = tmp_path / f"parley-chaos-p{_ended_pid()}-k3j2"
    running = tmp_path / f"parley-bench-gate-p{os.getpid()}-x9"
    older_name = tmp_path / "parley-nats-ab12cd"  # before names carried a process id
    not_a_directory = tmp_path / f"parley-demo-p{_ended_pid()}-file"
    someone_elses = tmp_path / f"other-p{_ended_pid()}-x"
    for directory in (ended, running, older_name, someone_elses):
        directory.mkdir()
    (ended / "store").mkdir()
    not_a_directory.write_text("")
    assert abandoned_scratch(tmp_path) == [ended]


def test_a_new_scratch_directory_removes_the_abandoned_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ended = tmp_path / f"parley-demo-p{_ended_pid()}-q1"
    (ended / "jetstream").mkdir(parents=True)
    (ended / "jetstream" / "data").write_bytes(b"x" * 1024)
    with scratch_directory("parley-demo-") as made:
        assert Path(made).name.startswith(f"parley-demo-p{os.getpid()}-")
        assert not ended.exists()
        assert abandoned_scratch(tmp_path) == []  # its own, while it runs, is not
    assert not Path(made).exists()
