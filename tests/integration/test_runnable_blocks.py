"""Every command block the README, docs and examples mark runnable runs as written.

A shipped example that no test runs rots: a renamed flag, a policy that no longer grants the
flow, an agent missing from the system. Each block runs here as a person would run it: in a
fresh directory (standing for a checkout after `make demo`, its `.venv` the one under test),
its `parley up` line in the background until it says `ready:`, then each other line to
completion, which must exit 0 and print what its `# prints:` comment says (exit 0 alone
proves little: an agent that answers "I could not ask the reviewer" exits 0 too); then
Ctrl-C, after which `parley up` must exit 0 too.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import REPO, ProcessOutput, close_up
from tests.support.runnable import READY_LINE, RunnableBlock, parse_blocks, runnable_blocks

pytestmark = pytest.mark.chaos

README = REPO / "README.md"
BLOCKS = [block for block in runnable_blocks() if block.path != README]
"""The README's block is walked by tests/browser/test_newcomer_walk.py, browser steps after."""
COMMAND_TIMEOUT_S = 120.0


def _person_env() -> dict[str, str]:
    """A person's shell: no test server or namespace set."""
    env = dict(os.environ)
    for name in ("NATS_URL", "PARLEY_NAMESPACE", "PARLEY_MONITOR_URL"):
        env.pop(name, None)
    return env


def _checkout(directory: Path) -> None:
    """Make `directory` look like a checkout to the block's commands: the `.venv` under test."""
    (directory / ".venv").symlink_to(Path(sys.executable).parent.parent)


def test_the_docs_mark_blocks_runnable() -> None:
    assert [block.path for block in runnable_blocks()].count(README) == 1
    assert sum(block.path.parent.name == "examples" for block in BLOCKS) >= 4, BLOCKS
    for block in BLOCKS:
        assert block.commands, f"{block.name}: an empty runnable block"
        unchecked = [c for c in block.runs if block.expected(c) is None]
        assert not unchecked, f"{block.name}: say what these print (`# prints: …`): {unchecked}"


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.name)
async def test_a_runnable_block_runs_as_written(block: RunnableBlock, tmp_path: Path) -> None:
    _checkout(tmp_path)
    env = _person_env()
    up: ProcessOutput | None = None
    if block.up is not None:
        argv = [str(tmp_path / ".venv/bin/parley"), "up", *block.up]
        up = ProcessOutput(argv, env, name="up", cwd=tmp_path)
    try:
        if up is not None:
            await up.wait_line(READY_LINE.pattern, timeout=120)
        for command in block.runs:
            done = await asyncio.to_thread(
                subprocess.run,
                ["bash", "-c", command],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
            )
            said = (done.stdout + done.stderr)[-3000:]
            assert done.returncode == 0, (
                f"{block.name}: `{command}` exited {done.returncode}:\n{said}"
            )
            assert "Traceback" not in said, (
                f"{block.name}: `{command}` printed a traceback:\n{said}"
            )
            expected = block.expected(command)
            if expected is not None:
                assert expected in said, (
                    f"{block.name}: `{command}` did not print {expected!r}:\n{said}"
                )
        if up is not None:
            up.signal(signal.SIGINT)
            assert await up.wait_exit(timeout=60) == 0, "\n".join(up.lines[-30:])
    finally:
        if up is not None:
            close_up(up)


def test_blocks_are_split_into_commands(tmp_path: Path) -> None:
    """The parser joins continuation lines and drops comments, as a shell would."""
    sample = "\n".join(
        [
            "```sh runnable",
            ".venv/bin/parley up examples/x   # in one terminal",
            "# a comment line",
            ".venv/bin/parley say @a \\",
            '    "hello"',
            "```",
            "```sh",
            ".venv/bin/parley not-run",
            "```",
        ]
    )
    path = tmp_path / "doc.md"
    path.write_text(sample)
    (block,) = parse_blocks(path)
    assert block.up == ["examples/x"]
    assert [shlex.split(c) for c in block.runs] == [[".venv/bin/parley", "say", "@a", "hello"]]
