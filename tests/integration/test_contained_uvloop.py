"""A contained command runs under uvloop, the event loop every actor (the tool runtime too)
runs on, not only under the default loop the other containment tests use.

uvloop's pipe transports write like asyncio's but are not `asyncio.WriteTransport`s: a type
check on the stdin pipe once turned every Shell.Exec the real runtime ran into an
INTERNAL_ERROR while every test under the default loop passed.

Without bubblewrap, uvloop enters the command's directory only after `preexec_fn` has
switched to the sandbox user, who may not pass through the directories above the workspace
(pytest's `tmp_path` is under one only root may enter): the child enters it before the switch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import uvloop

from actors.tools import ShellRun
from tests.support.contained import MODES, run


@pytest.mark.parametrize("bubblewrap", MODES)
def test_a_command_starts_in_its_workspace_and_reads_its_stdin_under_uvloop(
    tmp_path: Path, bubblewrap: bool
) -> None:
    async def contained() -> ShellRun:
        return await run(["cat"], tmp_path, bubblewrap=bubblewrap, stdin=b"from stdin\n")

    result = uvloop.run(contained())
    assert result.exit_code == 0, result
    assert result.output == b"from stdin\n"
