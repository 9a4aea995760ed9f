"""The person's keys for `parley orchestrate`: standard input as a queue of lines.

A terminal, a pipe or a socket is read as lines arrive; a regular file is read at once (a
script of answers). Anything else (`/dev/null`, a closed or missing stream) gives no key at
all: the event loop cannot watch such a device (epoll refuses `/dev/null` with EPERM, which
surfaced as a traceback printed by the loop), and there is nobody behind it to ask. A manual
session needs somebody to approve every draft, so the command refuses to open one without
keys (`no_keys_line`) rather than open a session nobody can steer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from collections.abc import AsyncIterator
from typing import Final

__all__ = ("END_OF_INPUT", "keys_readable", "no_keys_line", "stdin_lines")

END_OF_INPUT: Final = "\x04"
"""Put on the queue when standard input ends: no key will come after it (EOT)."""


def _stdin_kind() -> str:
    """`live` (read as lines arrive), `file` (read at once) or `none` (no keys can come)."""
    stream = sys.stdin
    if stream is None or stream.closed:
        return "none"
    try:
        fd = stream.fileno()
        mode = os.fstat(fd).st_mode
    except (OSError, ValueError):
        return "none"
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd):
        return "live"
    return "file" if stat.S_ISREG(mode) else "none"


def keys_readable() -> bool:
    """Whether a key can reach the command: a terminal, a pipe, a socket or a file."""
    return _stdin_kind() != "none"


def no_keys_line(mode: str) -> str:
    """The one line a session nobody can approve is refused with: what to do instead."""
    return (
        f"parley orchestrate: standard input is not a terminal (nor a pipe or file), so "
        f"nobody can approve {mode} mode's drafts here: run it in a terminal, or use "
        f"--mode full_auto (or semi_auto, which holds only a risky draft)"
    )


@contextlib.asynccontextmanager
async def stdin_lines() -> AsyncIterator[asyncio.Queue[str]]:
    """Standard input as a queue of lines, END_OF_INPUT at its end."""
    lines: asyncio.Queue[str] = asyncio.Queue()
    kind = _stdin_kind()
    if kind != "live":
        if kind == "file":
            for line in sys.stdin.read().splitlines():
                lines.put_nowait(line)
        lines.put_nowait(END_OF_INPUT)
        yield lines
        return
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
    )

    async def pump() -> None:
        while line := await reader.readline():
            lines.put_nowait(line.decode(errors="replace").rstrip("\n"))
        lines.put_nowait(END_OF_INPUT)

    task = asyncio.create_task(pump())
    try:
        yield lines
    finally:
        task.cancel()
        transport.close()
