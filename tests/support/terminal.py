"""A `parley` command run on a pseudo-terminal, as a person runs it, and what its screen shows.

Some output is drawn for terminals only (the live line of an agent's answer being written,
tools/_typing_line.py): a pipe would never see it, so the command's stdout and stderr are the
slave side of a pty and the test reads everything written to the master side.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ("on_terminal", "screen_lines")

_WIPE = "\r\x1b[K"


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: every writer of the slave side is gone
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


async def on_terminal(
    env: Mapping[str, str], *argv: str, cwd: Path, timeout: float
) -> tuple[int, str]:
    """Run `parley <argv>` with a terminal for its output: its exit code and all it wrote.
    Killed (and the test failed) if it has not exited within `timeout` seconds."""
    master, slave = pty.openpty()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tools",
        *argv,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env={**env, "COLUMNS": "200"},
        cwd=cwd,
    )
    os.close(slave)
    reading = asyncio.create_task(asyncio.to_thread(_read_all, master))
    written = b""
    try:
        code = await asyncio.wait_for(process.wait(), timeout)
    except TimeoutError:
        process.kill()
        raise
    finally:
        with contextlib.suppress(TimeoutError):
            written = await asyncio.wait_for(reading, 10)
        os.close(master)
    return code, written.decode(errors="replace")


def screen_lines(written: str) -> list[str]:
    """The lines a terminal shows for `written`: each line is what follows its last wipe
    (carriage return and erase-line), the terminal's own CR LF undone."""
    lines = written.replace("\r\n", "\n").split("\n")
    return [re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", line.split(_WIPE)[-1]) for line in lines]
