"""The workspace handed to a leased sandbox user and taken back (actors/tools/_sandbox_lease.py):
off the event loop, where other sessions' steps go on, and whole even when the run is
cancelled halfway.

The hand-over is held at its start by the test (a wrapper around the real walk waits for the
test's word): were it run on the event loop, the loop could not give that word, and the test
would fail at its bound.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from actors.tools import _sandbox_lease
from actors.tools._sandbox_lease import lease_sandbox_user
from tests.support.contained import needs_sandbox_user

pytestmark = needs_sandbox_user


def _workspace(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    (workspace / "src").mkdir(parents=True)
    for n in range(50):
        (workspace / "src" / f"f{n}.txt").write_text("x")
    return workspace


def _owners(workspace: Path) -> set[int]:
    found = {os.lstat(workspace).st_uid}
    for directory, dirs, files in os.walk(workspace):
        found |= {os.lstat(os.path.join(directory, n)).st_uid for n in (*dirs, *files)}
    return found


def _held_hand_over(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[threading.Event, threading.Event]:
    started, go = threading.Event(), threading.Event()
    walk = _sandbox_lease._hand_over

    def held(workspace: Path, uid: int) -> None:
        started.set()
        assert go.wait(20), "the test never let the hand-over go on"
        walk(workspace, uid)

    monkeypatch.setattr(_sandbox_lease, "_hand_over", held)
    return started, go


async def test_the_hand_over_leaves_the_event_loop_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = _workspace(tmp_path)
    started, go = _held_hand_over(monkeypatch)
    leased: list[int] = []

    async def run() -> None:
        async with lease_sandbox_user(workspace) as user:
            leased.append(user.uid)
            assert _owners(workspace) == {user.uid}

    running = asyncio.create_task(run())
    assert await asyncio.to_thread(started.wait, 20)
    go.set()  # given from the event loop, while the walk waits in its thread
    await running
    assert _owners(workspace) == {os.getuid()}
    assert leased and workspace not in _sandbox_lease._leases
    assert workspace not in _sandbox_lease._transitions


async def test_a_run_cancelled_during_the_hand_over_leaves_the_workspace_the_runtimes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = _workspace(tmp_path)
    started, go = _held_hand_over(monkeypatch)
    entered = asyncio.Event()

    async def run() -> None:
        async with lease_sandbox_user(workspace):
            entered.set()

    running = asyncio.create_task(run())
    assert await asyncio.to_thread(started.wait, 20)
    running.cancel()
    go.set()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert not entered.is_set()  # the run never started in it
    assert _owners(workspace) == {os.getuid()}  # handed over whole, then taken back whole
    assert workspace not in _sandbox_lease._leases
