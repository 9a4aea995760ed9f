"""The command reference names every process plain `parley up` starts.

A newcomer reads docs/commands.md to learn what the local system is, then watches `parley up`
print a `[name] started` line per process: a process the page leaves out (the tool runtime
was) reads as something unexpected running on their machine. The names come from the system
`parley up` really starts (`LOCAL_SYSTEM`), so an actor added there without a word here fails.
"""

from __future__ import annotations

import re
from pathlib import Path

from tools._local_system import LOCAL_SYSTEM

COMMANDS = Path(__file__).resolve().parents[1] / "docs" / "commands.md"
SECTION = "## What `parley up` sets up"
FIXED_ACTORS = {"tools": "tool runtime"}
"""How the page names a process whose name is not its word; an agent is named as `its-name`,
the gate, router, auditor and console by that word."""
AGENT_NAMES = set(LOCAL_SYSTEM.agents)


def _started() -> list[str]:
    """The processes plain `parley up` starts, by the name its `[name] started` line shows."""
    names = ["gate", "router", "auditor", *LOCAL_SYSTEM.agents]
    if LOCAL_SYSTEM.tools:
        names.append("tools")
    if LOCAL_SYSTEM.console:
        names.append("console")
    return names


def _named(name: str, prose: str) -> bool:
    if name in AGENT_NAMES:
        return f"`{name}`" in prose
    return re.search(rf"\b{FIXED_ACTORS.get(name, name)}\b", prose) is not None


def _unnamed(text: str) -> list[str]:
    prose = " ".join(text.split())
    return [name for name in _started() if not _named(name, prose)]


def _local_system_paragraph() -> str:
    text = COMMANDS.read_text()
    start = text.index(SECTION) + len(SECTION)
    return re.split(r"\n\s*\n", text[start:].lstrip("\n"), maxsplit=1)[0]


def _up_row() -> str:
    return next(
        line for line in COMMANDS.read_text().splitlines() if line.startswith("| `parley up")
    )


def test_the_local_system_section_names_every_process_parley_up_starts() -> None:
    assert _unnamed(_local_system_paragraph()) == []


def test_the_parley_up_row_names_every_process_parley_up_starts() -> None:
    assert _unnamed(_up_row()) == []


def test_a_process_left_out_of_the_page_is_seen() -> None:
    named = ("gate", "router", "console")
    left_out = [name for name in _started() if name not in named]
    assert _unnamed("the gate, the router, the console") == left_out
