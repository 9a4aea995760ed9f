"""Running Shell.Exec commands contained, for tests: both ways a command can be contained here,
and what is left of a run afterwards, read from /proc.

Every test of containment runs once under bubblewrap (skipped, with the reason, only where
bubblewrap cannot run) and once without it, so the fallback that a machine without
bubblewrap gets is tested on every machine.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from actors.tools import ShellLimits, ShellRun, run_contained
from actors.tools._confinement import sandbox_user_unusable
from actors.tools._sandbox import bubblewrap_unusable

__all__ = (
    "MODES",
    "OWN_USER",
    "alive",
    "needs_sandbox_user",
    "processes_in",
    "read_fifo",
    "run",
)

MODES = (
    pytest.param(
        True,
        id="bubblewrap",
        marks=pytest.mark.skipif(
            bubblewrap_unusable() is not None,
            reason=f"bubblewrap cannot run here: {bubblewrap_unusable()}",
        ),
    ),
    pytest.param(False, id="fallback"),
)
"""Parametrize a test's `bubblewrap` argument with these."""

OWN_USER = sandbox_user_unusable() is None
"""Whether commands run as a sandbox user of their own here (the runtime is root)."""

needs_sandbox_user = pytest.mark.skipif(
    not OWN_USER, reason=f"no sandbox user: {sandbox_user_unusable()}"
)


async def run(
    argv: Sequence[str], workspace: Path, *, bubblewrap: bool, **overrides: Any
) -> ShellRun:
    """`run_contained` in the workspace with small limits and a short timeout by default."""
    options: dict[str, Any] = {
        "cwd": workspace,
        "workspace": workspace,
        "environment": {},
        "timeout_s": 20.0,
        "max_output_bytes": 64 * 1024,
        "limits": ShellLimits(cpu_seconds=10, processes=32),
        "bubblewrap": bubblewrap,
    }
    options.update(overrides)
    return await run_contained(argv, **options)


def processes_in(workspace: Path) -> list[tuple[int, int, str]]:
    """The live processes working in the workspace or naming it on their command line
    (bubblewrap does, and runs as root, so no sandbox uid finds it): (pid, uid, command).

    Found by the workspace, never by a uid range, so runs of tests beside this one (another
    worker's) are neither seen nor touched.
    """
    found: list[tuple[int, int, str]] = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or not alive(int(name)):
            continue
        try:
            owner = os.stat(f"/proc/{name}").st_uid
            cwd = Path(os.readlink(f"/proc/{name}/cwd"))
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                words = cmdline.read().decode(errors="replace").split("\0")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if cwd.is_relative_to(workspace) or str(workspace) in words:
            found.append((int(name), owner, " ".join(words)))
    return found


def alive(pid: int) -> bool:
    """Whether `pid` is a live process here (a zombie is not: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (FileNotFoundError, ProcessLookupError):
        return False


async def read_fifo(path: Path, timeout: float = 15.0) -> str:
    """The first thing a command writes into the FIFO at `path`, waited for with a bound.

    Opened without blocking and read when the loop says it is readable, so a command that
    never writes leaves no thread blocked in `open`.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        loop = asyncio.get_running_loop()
        readable = asyncio.Event()
        loop.add_reader(fd, readable.set)
        try:
            async with asyncio.timeout(timeout):
                await readable.wait()
        finally:
            loop.remove_reader(fd)
        return os.read(fd, 4096).decode()
    finally:
        os.close(fd)
