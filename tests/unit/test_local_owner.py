"""One `parley up` a directory: the claim on `.parley/` (tools/_local_owner.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bus import ConfigError
from tools._local_owner import claim_local_directory, forget_local_system, record_local_system


def test_a_second_claim_is_refused_before_the_first_has_written_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two `parley up` started at the same instant: the first has claimed the directory but
    not yet written its URL, which the pid file's check alone let the second past."""
    monkeypatch.chdir(tmp_path)
    first = claim_local_directory()
    try:
        with pytest.raises(ConfigError, match=rf"`parley up` pid {os.getpid()}: stop it first"):
            claim_local_directory()
        record_local_system("nats://127.0.0.1:40001")  # the first one is up now
        with pytest.raises(ConfigError, match=r"pid \d+ \(nats://127.0.0.1:40001\)"):
            claim_local_directory()
        forget_local_system()
    finally:
        first.close()
    claim_local_directory().close()  # let go: the next `parley up` here starts


def test_a_claim_ends_with_its_process_and_is_not_inherited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel lets the lock go when its holder ends, however it ends, and a child started
    while it is held (every actor of `parley up`) does not keep it past its parent."""
    monkeypatch.chdir(tmp_path)
    holder = (
        "import subprocess, sys\n"
        "from tools._local_owner import claim_local_directory\n"
        "claim = claim_local_directory()\n"
        "child = subprocess.Popen(['sleep', '120'])  # lives on past its parent\n"
        "print(child.pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    repo = str(Path(__file__).resolve().parents[2])
    with subprocess.Popen(
        [sys.executable, "-c", holder],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": repo},
    ) as parent:
        assert parent.stdout is not None
        child_pid = int(parent.stdout.readline())
        try:
            with pytest.raises(ConfigError, match="already runs in this directory"):
                claim_local_directory()
            parent.kill()  # SIGKILL: nothing of its own runs to let the lock go
            parent.wait()
            claim_local_directory().close()  # its child still runs, and holds nothing
            assert Path(f"/proc/{child_pid}").exists()
        finally:
            parent.kill()
            os.kill(child_pid, signal.SIGKILL)
