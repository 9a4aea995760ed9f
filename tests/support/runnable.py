"""The command blocks of the README and docs marked runnable, and how a test runs them.

A block opened with ```` ```sh runnable ```` is a promise that its lines work as written, in
order, from a checkout after `make demo`: a `.venv/bin/parley up …` line is what a person runs
in a terminal of its own (started in the background, waited for until it says `ready:`), and
every other line runs to completion and must exit 0, and print what its `# prints: TEXT`
comment says when it has one. Blocks without the mark are examples
whose values a person fills in, and are not run.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import REPO

RUNNABLE_FENCE = "```sh runnable"
PRINTS = re.compile(r"#\s*prints:\s*(.+)$")
"""A command's promise about its output, checked: `... # prints: stopped: final`."""
DOCUMENTS = ("README.md", "docs/*.md", "examples/README.md")


@dataclass(frozen=True)
class RunnableBlock:
    """One runnable block: where it is and its commands, continuation lines joined."""

    path: Path
    line: int
    commands: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def up(self) -> list[str] | None:
        """The `parley up` line's argv without its program, when the block has one."""
        for command in self.commands:
            argv = shlex.split(command, comments=True)
            if argv[:2] == [".venv/bin/parley", "up"]:
                return argv[2:]
        return None

    @staticmethod
    def expected(command: str) -> str | None:
        """What a command's `# prints: TEXT` comment promises its output holds."""
        found = PRINTS.search(command)
        return found.group(1).strip() if found else None

    @property
    def runs(self) -> tuple[str, ...]:
        """The commands run to completion (all but the `parley up` line)."""
        return tuple(
            c
            for c in self.commands
            if shlex.split(c, comments=True)[:2] != [".venv/bin/parley", "up"]
        )


def parse_blocks(path: Path) -> list[RunnableBlock]:
    """Every runnable block of the Markdown file at `path`."""
    blocks: list[RunnableBlock] = []
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        if lines[index].strip() != RUNNABLE_FENCE:
            index += 1
            continue
        start = index + 1
        commands: list[str] = []
        pending = ""
        index += 1
        while index < len(lines) and not lines[index].startswith("```"):
            text = pending + lines[index]
            if text.endswith("\\"):
                pending = text[:-1] + " "
            else:
                pending = ""
                if shlex.split(text, comments=True):
                    commands.append(text.strip())
            index += 1
        blocks.append(RunnableBlock(path, start, tuple(commands)))
        index += 1
    return blocks


def runnable_blocks() -> list[RunnableBlock]:
    """The runnable blocks of every document a person reads."""
    found: list[RunnableBlock] = []
    for pattern in DOCUMENTS:
        for path in sorted(REPO.glob(pattern)):
            found.extend(parse_blocks(path))
    return found


READY_LINE = re.compile(r"^\[nats\] ready: ")

COMMAND_TIMEOUT_S = 120.0


def person_env() -> dict[str, str]:
    """A person's shell: no test server or namespace set."""
    env = dict(os.environ)
    for name in ("NATS_URL", "PARLEY_NAMESPACE", "PARLEY_MONITOR_URL"):
        env.pop(name, None)
    return env


def as_checkout(directory: Path) -> None:
    """Make `directory` look like a checkout after `make demo`: the `.venv` under test."""
    (directory / ".venv").symlink_to(Path(sys.executable).parent.parent)


async def run_documented(command: str, cwd: Path, env: dict[str, str], where: str = "") -> str:
    """Run one documented line as a person would (bash, in `cwd`); its output, after checking
    it exited 0 without a traceback and printed what its `# prints:` comment says."""
    done = await asyncio.to_thread(
        subprocess.run,
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    said = done.stdout + done.stderr
    shown = f"{where}: `{command}`" if where else f"`{command}`"
    assert done.returncode == 0, f"{shown} exited {done.returncode}:\n{said[-3000:]}"
    assert "Traceback" not in said, f"{shown} printed a traceback:\n{said[-3000:]}"
    expected = RunnableBlock.expected(command)
    assert expected is None or expected in said, f"{shown} did not print {expected!r}:\n{said}"
    return said
