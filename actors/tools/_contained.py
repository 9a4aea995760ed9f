"""One program run contained: the mechanism under Shell.Exec, for any executor that runs one.

The program is an argv, executed directly (never through a shell). It runs in a process
group of its own, under resource limits (`ShellLimits`), with only the environment it is
given, under bubblewrap where it can run (`_sandbox`) and, when the runtime is root, as a
user of its own (`_confinement`). Its stdout and stderr are read together as they come (or
apart, for a caller that parses stdout: git), kept up to the output cap and counted past
it, so a flood never blocks it nor fills the runtime's memory. On its wall-clock timeout, or
when its caller is cancelled, every process of the run is killed: nothing a run starts
outlives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Final, cast

from actors.tools._confinement import (
    ShellLimits,
    child_setup,
    network_isolation_unusable,
    sandbox_user_unusable,
    sweep_user,
)
from actors.tools._sandbox import bubblewrap_argv, bubblewrap_unusable
from actors.tools._sandbox_lease import SandboxUser, lease_sandbox_user
from actors.tools._uninterrupted import uninterrupted

__all__ = ("SHELL_PATH", "ShellRun", "run_contained")

SHELL_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
"""The PATH every command gets; a profile's environment cannot change it (the scope layer
checks `argv[0]` by name, so the name must not resolve to a program the workspace planted)."""

_DRAIN_GRACE_S: Final = 2.0
"""How long the output is still read once every process of the run is gone or killed."""

_ERRORS_CAP: Final = 16 * 1024
"""The stderr kept when it is read apart (the rest is read and dropped)."""

_LIMIT_SIGNALS: Final[dict[int, str]] = {
    signal.SIGXCPU: "cpu_seconds (CPU time limit)",
    signal.SIGXFSZ: "file_size_bytes (file size limit)",
}


@dataclass(frozen=True, slots=True)
class ShellRun:
    """What one contained run produced."""

    output: bytes
    """stdout and stderr, interleaved as written, up to the cap (stdout alone when stderr
    was read apart)."""
    exit_code: int | None
    """The program's exit status; None when a signal ended it."""
    signal: int | None
    """The signal that ended it (under bubblewrap, an exit status of 128+N reads as signal
    N: the sandbox reports a killed command that way, like a shell)."""
    truncated: bool
    dropped_bytes: int
    """Output read past the cap and thrown away."""
    timed_out: bool
    duration_s: float
    containment: str
    """`bubblewrap`, `sandbox-user` (no bubblewrap, runtime root) or `limits-only`."""
    errors: bytes = b""
    """stderr's first 16 KiB, when it was read apart."""

    @property
    def limit_hit(self) -> str | None:
        """The limit that ended the run, if one did (the timeout, or a limit's signal)."""
        if self.timed_out:
            return "timeout_s (wall-clock timeout)"
        return _LIMIT_SIGNALS.get(self.signal) if self.signal else None


async def run_contained(
    argv: Sequence[str],
    *,
    cwd: Path,
    workspace: Path,
    environment: Mapping[str, str],
    stdin: bytes = b"",
    timeout_s: float,
    max_output_bytes: int,
    limits: ShellLimits,
    network: bool = False,
    bubblewrap: bool | None = None,
    stderr_apart: bool = False,
) -> ShellRun:
    """Run `argv` contained, in `cwd` inside `workspace`, and say what came of it.

    Args:
        network: whether the command may reach the network (only bubblewrap, or a root
            runtime, can take it away).
        bubblewrap: run under bubblewrap; None (the default) where it can run here.
        stderr_apart: read stderr apart from stdout (`ShellRun.errors`).

    Raises:
        OSError: the program could not be started (not found, not executable).
        ValueError: `cwd` resolves outside `workspace`.
        RuntimeError: bubblewrap was asked for and cannot run here.
    """
    workspace, cwd = _checked_start(argv[0], workspace, cwd)
    unusable = bubblewrap_unusable()
    if bubblewrap and unusable is not None:
        raise RuntimeError(f"bubblewrap cannot be used: {unusable}")
    if bubblewrap is False:
        unusable = "not asked for"
    own_user = sandbox_user_unusable() is None
    started = time.monotonic()
    loop = asyncio.get_running_loop()
    async with AsyncExitStack() as stack:
        user = await stack.enter_async_context(lease_sandbox_user(workspace)) if own_user else None
        uid = user.uid if user else None
        command = list(argv)
        if unusable is None:
            prefix = bubblewrap_argv(workspace=workspace, cwd=cwd, network=network, sandbox_uid=uid)
            command = prefix + command
        try:
            # Never interrupted: asyncio would kill the program alone and wait for pipes a
            # process it started holds open; a cancelled run is killed whole below instead.
            (transport, run), cancelled = await uninterrupted(
                loop.subprocess_exec(
                    lambda: _Run(max_output_bytes),
                    *command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE if stderr_apart else subprocess.STDOUT,
                    env=_child_environment(environment, workspace),
                    start_new_session=True,
                    preexec_fn=child_setup(
                        limits,
                        uid=uid,
                        switch_user=unusable is not None,
                        isolate_network=unusable is not None
                        and not network
                        and network_isolation_unusable() is None,
                        cwd=cwd,
                    ),
                )
            )
        except subprocess.SubprocessError as exc:  # the child's setup failed before exec
            raise OSError(f"the contained child could not be set up: {exc}") from exc
        try:
            if cancelled:
                raise asyncio.CancelledError
            timed_out = await _supervise(transport, run, stdin, timeout_s, user)
        finally:
            if not run.exited.is_set():  # cancelled: nothing of the run may stay
                await _kill_and_reap(transport.get_pid(), user)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_DRAIN_GRACE_S):
                        await run.exited.wait()
            transport.close()
    status = transport.get_returncode()
    assert status is not None  # noqa: S101 - it exited (awaited above)
    exit_code: int | None = status if status >= 0 else None
    ended_by = -status if status < 0 else None
    if unusable is None and status > 128 and status - 128 in signal.valid_signals():
        exit_code, ended_by = None, status - 128
    return ShellRun(
        output=bytes(run.kept),
        exit_code=exit_code,
        signal=ended_by,
        truncated=run.dropped > 0,
        dropped_bytes=run.dropped,
        timed_out=timed_out,
        duration_s=time.monotonic() - started,
        containment="bubblewrap"
        if unusable is None
        else ("sandbox-user" if own_user else "limits-only"),
        errors=bytes(run.errors),
    )


class _Run(asyncio.SubprocessProtocol):
    """One run's output and ends, as the event loop reports them.

    The output is kept up to `cap` bytes and only counted past it: the loop reads the pipe
    as fast as the program writes, so a flood never blocks the program nor fills memory.
    `exited` is set when the program itself exits, even while a process it left holds the
    pipe open (which `Process.wait()` would wait for); `closed` when the pipes are closed too.
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.kept = bytearray()
        self.dropped = 0
        self.errors = bytearray()
        self.exited = asyncio.Event()
        self.closed = asyncio.Event()

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        if fd == 2:  # stderr, read apart
            room = _ERRORS_CAP - len(self.errors)
            self.errors += data[: max(room, 0)] if isinstance(data, bytes) else b""
            return
        room = self.cap - len(self.kept)
        self.kept += data[:room] if isinstance(data, bytes) else b""
        self.dropped += max(0, len(data) - room)

    def process_exited(self) -> None:
        self.exited.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()


async def _supervise(
    transport: asyncio.SubprocessTransport,
    run: _Run,
    stdin: bytes,
    timeout_s: float,
    user: SandboxUser | None,
) -> bool:
    """Feed stdin and wait for the program; True when its time ran out.

    Once the program has exited (or its time is up), what it left behind is killed, then
    the rest of the output is read (bounded: a process that escaped the kill and holds the
    pipe open is not waited for).
    """
    # stdin=PIPE, so a writable pipe; not an asyncio.WriteTransport under uvloop, which the
    # actors run on: an isinstance check would fail every command there.
    stdin_pipe = cast(asyncio.WriteTransport, transport.get_pipe_transport(0))
    if stdin:
        stdin_pipe.write(stdin)  # unread: no error
    stdin_pipe.close()
    timed_out = False
    try:
        async with asyncio.timeout(timeout_s):
            await run.exited.wait()
    except TimeoutError:
        timed_out = True
    await _kill_and_reap(transport.get_pid(), user)
    await run.exited.wait()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_DRAIN_GRACE_S):
            await run.closed.wait()
    return timed_out


async def _kill_and_reap(group: int, user: SandboxUser | None) -> None:
    """Kill the run, then wait (bounded) until the program's own children are gone too.

    Under bubblewrap the program's child is bubblewrap's inner process, outside the run's
    group and killed only once the outer one is (`--die-with-parent`): a run that returned at
    once could leave it alive for a moment after its step ended. Each is awaited on a pidfd,
    an event, collected before the kill.
    """
    children = _children_of(group)
    _kill_run(group, user)
    loop = asyncio.get_running_loop()
    for pid in children:
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # gone already
            continue
        gone = asyncio.Event()
        loop.add_reader(fd, gone.set)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_DRAIN_GRACE_S):
                    await gone.wait()
        finally:
            loop.remove_reader(fd)
            os.close(fd)


def _children_of(pid: int) -> list[int]:
    """The direct children of `pid`, from /proc (none when it is gone)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listed:
            return [int(word) for word in listed.read().split()]
    except (OSError, ValueError):
        return []


def _kill_run(group: int, user: SandboxUser | None) -> None:
    """SIGKILL the run's process group, then every process of its sandbox user.

    The group's id stays reserved while any member lives, so the signal reaches no other
    program; the sweep reaches what left the group (only a sandbox user makes that
    possible to know). While another run shares the user, the sweep waits for the last
    run's end (`lease_sandbox_user`).
    """
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if user is not None and user.alone():
        sweep_user(user.uid)


def _checked_start(program: str, workspace: Path, cwd: Path) -> tuple[Path, Path]:
    """The resolved workspace and cwd, once the cwd is known to be in the workspace and the
    program to be there.

    Checked before anything starts: the sandbox sees the same /usr, so the answer is the
    same inside it, and a missing program is a failure to start rather than an exit code.
    """
    workspace, cwd = workspace.resolve(), cwd.resolve()
    if not cwd.is_relative_to(workspace):
        raise ValueError(f"cwd {cwd} is outside the workspace {workspace}")
    found = (cwd / program).is_file() if "/" in program else shutil.which(program, path=SHELL_PATH)
    if not found:
        raise FileNotFoundError(f"{program!r} is not a program on {SHELL_PATH} or in the cwd")
    return workspace, cwd


def _child_environment(given: Mapping[str, str], workspace: Path) -> dict[str, str]:
    """Only what the profile names, and the fixed PATH, HOME and a default LANG.

    Nothing of the runtime's own environment is passed on, so none of its credentials are.
    """
    return {"LANG": "C.UTF-8", **given, "PATH": SHELL_PATH, "HOME": str(workspace)}
