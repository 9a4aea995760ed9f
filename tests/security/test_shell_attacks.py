"""Issue 31: attacks by a Shell.Exec command on the machine that runs it, each one contained.

Every attack runs as a real process, once under bubblewrap (skipped only where bubblewrap
cannot run, with the reason) and once without it:

- a fork bomb bounded by the run's process limit, its processes all gone after the run, and
  the machine still running commands at once;
- an output flood kept to the cap and counted, finite or endless, without the runner hanging;
- a run past its timeout, with a grandchild that ignores SIGTERM and a `setsid` escapee: all
  killed (the escapee by the sweep of the run's own uid, or by bubblewrap's PID namespace);
- a cancelled run leaving no process;
- a file written past the file size limit, stopped at it, and the run failed naming it;
- a secret in the runtime's environment, unseen by the command;
- a working directory outside the workspace, refused.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.tools import (
    SHELL_PATH,
    ScopeDenied,
    ShellLimits,
    ToolInvocation,
    execute_shell,
)
from actors.tools._confinement import SANDBOX_UIDS, processes_of, sweep_user
from schemas import Capability, ErrorCode
from tests.support.contained import (
    MODES,
    OWN_USER,
    alive,
    needs_sandbox_user,
    processes_in,
    read_fifo,
    run,
)

pytestmark = pytest.mark.parametrize("bubblewrap", MODES)


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    """A session's workspace; any process a failed test left behind is killed after it."""
    path = tmp_path / "ws"
    path.mkdir()
    yield path.resolve()
    for _, uid, _ in processes_in(path.resolve()):
        if uid in SANDBOX_UIDS:
            sweep_user(uid)


@needs_sandbox_user
async def test_a_fork_bomb_stops_at_the_process_limit_and_leaves_nothing(
    workspace: Path, bubblewrap: bool
) -> None:
    # A binary tree of shells 8 deep: 511 processes without a limit (few enough to be safe
    # on a shared machine when the defence is taken away to check this test), 16 with it.
    bomb = (
        "id -u > uid; "
        "b() { if [ $1 -gt 0 ]; then b $(($1-1)) & b $(($1-1)) & fi; exec sleep 60; }; b 8"
    )
    result = await run(
        ["sh", "-c", bomb],
        workspace,
        bubblewrap=bubblewrap,
        timeout_s=3.0,
        limits=ShellLimits(processes=16),
    )
    assert b"Cannot fork" in result.output, result.output[-500:]
    assert result.timed_out
    uid = int((workspace / "uid").read_text())
    assert processes_of(uid) == []
    assert processes_in(workspace) == []
    after = await run(["echo", "still fine"], workspace, bubblewrap=bubblewrap, timeout_s=10.0)
    assert (after.exit_code, after.output) == (0, b"still fine\n")
    assert after.duration_s < 5.0


async def test_an_output_flood_is_capped_counted_and_never_blocks(
    workspace: Path, bubblewrap: bool
) -> None:
    finite = await run(
        ["head", "-c", "20000000", "/dev/zero"],
        workspace,
        bubblewrap=bubblewrap,
        max_output_bytes=1000,
    )
    assert finite.exit_code == 0
    assert (len(finite.output), finite.truncated) == (1000, True)
    assert finite.dropped_bytes == 20_000_000 - 1000
    endless = await run(
        ["yes", "flood"], workspace, bubblewrap=bubblewrap, max_output_bytes=1000, timeout_s=1.0
    )
    assert endless.timed_out and endless.truncated
    assert endless.output == b"flood\n" * 166 + b"floo"
    assert endless.dropped_bytes > 0
    assert endless.duration_s < 5.0, "the runner waited past the timeout and its kill"


async def test_a_run_past_its_timeout_loses_every_process_it_started(
    workspace: Path, bubblewrap: bool
) -> None:
    ready = workspace / "ready"
    os.mkfifo(ready)
    # A grandchild that ignores SIGTERM and a `setsid` escapee that left the process group
    # (and ignores SIGHUP), both started before the command says it is ready.
    command = (
        "sh -c 'trap \"\" TERM; exec sleep 60' & grandchild=$!; "
        "setsid sh -c 'trap \"\" TERM HUP; exec sleep 61' & escapee=$!; "
        'echo "$(id -u) $grandchild $escapee" > ready; exec sleep 62'
    )
    running = asyncio.create_task(
        run(["sh", "-c", command], workspace, bubblewrap=bubblewrap, timeout_s=5.0)
    )
    uid, grandchild, escapee = map(int, (await read_fifo(ready)).split())
    result = await running
    assert result.timed_out
    assert result.limit_hit is not None and result.limit_hit.startswith("timeout_s")
    if OWN_USER:
        assert processes_of(uid) == []
    assert processes_in(workspace) == []
    if not bubblewrap:  # outside the sandbox's PID namespace its pids are real ones
        assert not alive(grandchild), "the grandchild that ignored SIGTERM survived"
        if OWN_USER:
            assert not alive(escapee), "the setsid escapee survived"


async def test_a_cancelled_run_leaves_no_process(workspace: Path, bubblewrap: bool) -> None:
    ready = workspace / "ready"
    os.mkfifo(ready)
    command = 'sh -c \'trap "" TERM; exec sleep 60\' & echo "$(id -u) $$ $!" > ready; exec sleep 61'
    running = asyncio.create_task(
        run(["sh", "-c", command], workspace, bubblewrap=bubblewrap, timeout_s=60.0)
    )
    uid, main, grandchild = map(int, (await read_fifo(ready)).split())
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    if OWN_USER:
        assert processes_of(uid) == []
    assert processes_in(workspace) == []
    if not bubblewrap:
        assert not alive(main) and not alive(grandchild)


async def test_a_run_cancelled_while_it_starts_leaves_no_process(
    workspace: Path, bubblewrap: bool
) -> None:
    """Cancelled at each of its first steps on the event loop: a start interrupted there
    once left asyncio waiting for the pipe a grandchild held (a minute, here)."""
    for steps in range(6):
        running = asyncio.create_task(
            run(["sh", "-c", "sleep 60 & exec sleep 61"], workspace, bubblewrap=bubblewrap)
        )
        for _ in range(steps):
            await asyncio.sleep(0)
        running.cancel()
        async with asyncio.timeout(10):
            with pytest.raises(asyncio.CancelledError):
                await running
        assert processes_in(workspace) == []


async def test_a_file_past_the_size_limit_stops_at_it_and_fails_the_run(
    workspace: Path, bubblewrap: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["dd", "if=/dev/zero", "of=big", "bs=100000", "count=20"]
    result = await run(
        argv, workspace, bubblewrap=bubblewrap, limits=ShellLimits(file_size_bytes=1_000_000)
    )
    assert result.signal == signal.SIGXFSZ
    assert (workspace / "big").stat().st_size == 1_000_000
    # The executor says which limit ended the run (under the machine's own choice of
    # bubblewrap: this parametrization runs it twice, each must fail the same way).
    outcome = await execute_shell(
        _invocation(workspace, {"argv": argv}), limits=ShellLimits(file_size_bytes=1_000_000)
    )
    assert (outcome.status, outcome.error_code) == ("failed", ErrorCode.TOOL_EXECUTION_FAILED)
    assert outcome.error_message is not None and "file_size_bytes" in outcome.error_message


async def test_the_runtime_environment_is_not_inherited(
    workspace: Path, bubblewrap: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARLEY_RUNTIME_SECRET", "hunter2-credential")
    result = await run(
        ["env"],
        workspace,
        bubblewrap=bubblewrap,
        environment={"GIVEN": "by the profile", "PATH": "/planted", "HOME": "/elsewhere"},
    )
    seen = dict(line.split("=", 1) for line in result.output.decode().splitlines())
    assert b"hunter2" not in result.output
    here = str(workspace)
    assert seen.pop("PWD", here) == here  # bubblewrap's --chdir says where it put it
    assert seen == {
        "GIVEN": "by the profile",
        "LANG": "C.UTF-8",
        "PATH": SHELL_PATH,
        "HOME": here,
    }


async def test_a_working_directory_outside_the_workspace_is_refused(
    workspace: Path, bubblewrap: bool
) -> None:
    (workspace / "link").symlink_to(workspace.parent)
    for cwd in ("..", "link", str(workspace.parent)):
        with pytest.raises(ScopeDenied) as denied:
            await execute_shell(_invocation(workspace, {"argv": ["pwd"], "cwd": cwd}))
        assert denied.value.rule == "allowed_paths"
    with pytest.raises(ValueError, match="outside the workspace"):
        await run(["pwd"], workspace, bubblewrap=bubblewrap, cwd=workspace / "link")


def _invocation(workspace: Path, arguments: dict[str, object]) -> ToolInvocation:
    return ToolInvocation(
        capability="Shell.Exec",
        arguments=arguments,
        scope=Capability(name="Shell.Exec"),
        workspace=workspace,
        session_id="session-1",
        step_id="step-1",
    )
