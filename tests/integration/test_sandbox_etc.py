"""Under bubblewrap, a command running as its sandbox user reads the few files of /etc the
sandbox shows, and does not see the others.

bubblewrap makes the directories it creates for its mounts root's alone (mode 0700): with
/etc made so, a sandbox user could read none of the files bound into it (`hosts`, `passwd`,
the CA certificates), and git stopped at /etc/gitconfig, refused instead of absent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support.contained import MODES, OWN_USER, run

pytestmark = pytest.mark.skipif(not OWN_USER, reason="the runtime is not root: no sandbox user")


@pytest.mark.parametrize("bubblewrap", MODES[:1])
async def test_a_sandbox_user_reads_the_etc_files_the_sandbox_shows(
    tmp_path: Path, bubblewrap: bool
) -> None:
    result = await run(["cat", "/etc/hosts"], tmp_path, bubblewrap=bubblewrap)
    assert result.exit_code == 0, result
    assert result.output == await asyncio.to_thread(Path("/etc/hosts").read_bytes)


@pytest.mark.parametrize("bubblewrap", MODES[:1])
async def test_git_runs_in_the_sandbox_without_the_system_config(
    tmp_path: Path, bubblewrap: bool
) -> None:
    result = await run(["git", "init", "--quiet"], tmp_path, bubblewrap=bubblewrap)
    assert result.exit_code == 0, result.output
    assert (tmp_path / ".git" / "HEAD").is_file()
