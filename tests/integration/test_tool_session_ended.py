"""Nothing more is done in a session once it ended (bus/_session_ends.py,
actors/tools/_held_steps.py `on_session_end`, actors/agent/_host.py).

A newcomer's walk stopped `parley task` at its first approval: the session ended `canceled`,
yet the agent went on asking for steps (files read and written, a commit) for minutes, and a
request held from before the stop ran when approved. Three things now keep an ended session
still, each proven here with a session stopped from another terminal (`parley collab --stop`),
not by its task's own cancel:

- the tool runtime lets go of what the session held for its person as soon as the router
  stores the end: an approval given afterwards applies to nothing;
- a step asked after the end is neither held nor run: the runtime reads how the session
  stands before either;
- the agent whose step was refused so is not asked to go on: its host answers the call
  `SESSION_EXPIRED` instead of asking its brain again.

The system is tests/support/tool_system.py's, every process its own user: `keeper` writes
only with a person's approval.
"""

from __future__ import annotations

import json
import re
import signal

from tests.support.processes import ProcessOutput, stopped
from tests.support.tool_system import ToolSystem

DECIDE = re.compile(r"approve: parley approvals approve (\S+) --session (\S+)")
OPENED = re.compile(r"^session (\S+): keeper")
STOPPED_ASKING = "brain could not answer.*SESSION_EXPIRED"


async def _stop(system: ToolSystem, say: ProcessOutput, session: str) -> None:
    """Stop `session` from another terminal, and see `say`'s follow end with it."""
    stop = system.cli("collab", "--stop", session)
    assert await stop.wait_exit(30) in (0, 130), stop.lines
    stop.close()
    assert await say.wait_exit(30) == 130, say.lines  # its session ended canceled


def _asked_steps(keeper: ProcessOutput, start: int, stopped_line: str) -> list[int]:
    """The steps keeper's brain was asked about in the call its host stopped answering."""
    call_id = json.loads(stopped_line)["call_id"]
    asked = [json.loads(line) for line in keeper.lines[start:] if "brain asked" in line]
    return [a["step"] for a in asked if a["call_id"] == call_id]


async def test_what_a_stopped_session_held_is_let_go_and_its_agent_stops(
    tool_system: ToolSystem,
) -> None:
    system, workspaces = tool_system, tool_system.workspaces
    await system.agent("keeper")
    keeper = system.processes["keeper"]
    start = len(keeper.lines)
    say = system.cli("say", "@keeper", "zeta")
    try:
        _, line = await say.wait_line(DECIDE.pattern, timeout=30)
        found = DECIDE.search(line)
        assert found is not None
        approval_id, session = found.group(1), found.group(2)
        # Shown under its approval rule's title (tests/support/tool_system.py's "writes").
        assert any(line.startswith("Writes: keeper asks to use File.Write") for line in say.lines)
        await _stop(system, say, session)
        # The runtime lets the held write go at the end: keeper is answered SESSION_EXPIRED
        # (held on, it would wait its 120 s for a decision), and its host stops there.
        _, stopped_line = await keeper.wait_line(STOPPED_ASKING, start=start, timeout=30)
        assert _asked_steps(keeper, start, stopped_line) == [0], keeper.lines[start:]
        listed = system.cli("approvals", "list")
        assert await listed.wait_exit(30) == 0, listed.lines
        assert not [line for line in listed.lines if approval_id in line], listed.lines
        listed.close()
        approve = system.cli("approvals", "approve", approval_id, "--session", session)
        await approve.wait_exit(30)
        approve.close()
        assert any(
            "APPROVAL_ALREADY_DECIDED" in line and "session ended (canceled)" in line
            for line in approve.lines
        ), approve.lines
        assert not list(workspaces.glob("*/zeta.txt")), "the step ran in an ended session"
        system.assert_healthy()
    finally:
        say.close()


async def test_a_step_asked_after_its_session_ended_is_neither_held_nor_run(
    tool_system: ToolSystem,
) -> None:
    """The tool runtime is paused (SIGSTOP) from before the session opens until after it
    ended, so keeper's write reaches it only then: without the runtime's read of how the
    session stands it would be held for a person who stopped the session."""
    system, workspaces = tool_system, tool_system.workspaces
    await system.agent("keeper")
    keeper, tools = system.processes["keeper"], system.processes["tools"]
    start, tools_start = len(keeper.lines), len(tools.lines)
    tools.signal(signal.SIGSTOP)
    await stopped(tools.process.pid)
    say = system.cli("say", "@keeper", "theta")
    try:
        _, line = await say.wait_line(OPENED.pattern, timeout=30)
        found = OPENED.search(line)
        assert found is not None
        await keeper.wait_line('"brain asked".*"step":0', start=start, timeout=30)
        await _stop(system, say, found.group(1))
    finally:
        tools.signal(signal.SIGCONT)
        say.close()
    _, stopped_line = await keeper.wait_line(STOPPED_ASKING, start=start, timeout=30)
    assert _asked_steps(keeper, start, stopped_line) == [0], keeper.lines[start:]
    held = [line for line in tools.lines[tools_start:] if "held for approval" in line]
    assert not held, held
    assert not list(workspaces.glob("*/theta.txt")), "the step ran in an ended session"
    system.assert_healthy()
