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

import shlex
import signal
from pathlib import Path

import pytest

from tests.support.processes import REPO, ProcessOutput, close_up
from tests.support.runnable import (
    READY_LINE,
    RunnableBlock,
    as_checkout,
    parse_blocks,
    person_env,
    run_documented,
    runnable_blocks,
)

pytestmark = pytest.mark.chaos

README = REPO / "README.md"
BLOCKS = [block for block in runnable_blocks() if block.path != README]
"""The README's block is walked by tests/browser/test_newcomer_walk.py, browser steps after."""


def test_the_docs_mark_blocks_runnable() -> None:
    assert [block.path for block in runnable_blocks()].count(README) == 1
    assert sum(block.path.parent.name == "examples" for block in BLOCKS) >= 4, BLOCKS
    for block in BLOCKS:
        assert block.commands, f"{block.name}: an empty runnable block"
        unchecked = [c for c in block.runs if block.expected(c) is None]
        assert not unchecked, f"{block.name}: say what these print (`# prints: …`): {unchecked}"


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.name)
async def test_a_runnable_block_runs_as_written(block: RunnableBlock, tmp_path: Path) -> None:
    as_checkout(tmp_path)
    env = person_env()
    up: ProcessOutput | None = None
    if block.up is not None:
        argv = [str(tmp_path / ".venv/bin/parley"), "up", *block.up]
        up = ProcessOutput(argv, env, name="up", cwd=tmp_path)
    try:
        if up is not None:
            await up.wait_line(READY_LINE.pattern, timeout=120)
        for command in block.runs:
            await run_documented(command, tmp_path, env, block.name)
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
