"""A contained command runs under uvloop, the event loop every actor (the tool runtime too)
runs on, not only under the default loop the other containment tests use.

uvloop's pipe transports write like asyncio's but are not `asyncio.WriteTransport`s: a type
check on the stdin pipe once turned every Shell.Exec the real runtime ran into an
INTERNAL_ERROR while every test under the default loop passed.

Only the bubblewrap mode, which `make test` installs: without it, uvloop changes to the
command's directory after the switch to the sandbox user (the default loop does it before),
so a workspace under a directory only root may enter, as pytest's `tmp_path` is, cannot be
entered; that is another matter than this test's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import uvloop

from actors.tools import ShellRun
from tests.support.contained import MODES, run


@pytest.mark.parametrize("bubblewrap", MODES[:1])
def test_a_command_reads_its_stdin_and_exits_under_uvloop(tmp_path: Path, bubblewrap: bool) -> None:
    async def contained() -> ShellRun:
        return await run(["cat"], tmp_path, bubblewrap=bubblewrap, stdin=b"from stdin\n")

    result = uvloop.run(contained())
    assert result.exit_code == 0, result
    assert result.output == b"from stdin\n"
