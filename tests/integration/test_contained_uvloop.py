"""A contained command run on uvloop, the event loop every actor process runs on.

uvloop's pipe transports are no `asyncio.WriteTransport` subclasses: a runner that checked
the stdin pipe's type failed every Shell.Exec inside the tool runtime (`INTERNAL_ERROR`),
while the containment tests, on asyncio's own loop, all passed. Found by the chaos tool mix
(tools/chaos/_tools.py).

The workspace is in a directory every user may pass through: uvloop enters the command's
directory after the child took its sandbox user (asyncio enters it before), so under the
tests' own temporary directory, which only root may enter, the fallback could not start.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvloop

from actors.tools import ShellRun
from tests.support.contained import MODES, run


@pytest.fixture
def workspace() -> Iterator[Path]:
    outer = Path(tempfile.mkdtemp(prefix="parley-uvloop-"))
    outer.chmod(0o711)
    path = outer / "ws"
    path.mkdir(mode=0o700)
    yield path
    shutil.rmtree(outer)


@pytest.mark.parametrize("bubblewrap", MODES)
def test_a_command_gets_its_stdin_on_uvloop(workspace: Path, bubblewrap: bool) -> None:
    async def main() -> ShellRun:
        return await run(["cat"], workspace, bubblewrap=bubblewrap, stdin=b"one line\n")

    done = uvloop.run(main())
    assert (done.exit_code, done.output) == (0, b"one line\n"), done
