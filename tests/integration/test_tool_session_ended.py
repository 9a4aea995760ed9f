"""No tool step runs in a session its person ended (bus/_session_ends.py).

A newcomer's walk stopped `parley task` at its first approval: the session ended `canceled`,
yet the agent went on asking for steps (files read and written, a commit) for minutes, and a
request held from before the stop ran when approved. The tool runtime now asks how the
session stands before it holds or runs a step. Here the person's session waits on a held
write; the person stops the session, then approves the request: the step is not run, and its
answer says why.

The system is tests/support/tool_system.py's, every process its own user: `keeper` writes
only with a person's approval.
"""

from __future__ import annotations

import re

from tests.support.tool_system import ToolSystem

DECIDE = re.compile(r"approve: parley approvals approve (\S+) --session (\S+)")


async def test_an_approval_given_after_the_session_was_stopped_runs_nothing(
    tool_system: ToolSystem,
) -> None:
    system, workspaces = tool_system, tool_system.workspaces
    await system.agent("keeper")
    say = system.cli("say", "@keeper", "zeta")
    try:
        _, line = await say.wait_line(DECIDE.pattern, timeout=30)
        found = DECIDE.search(line)
        assert found is not None
        approval_id, session = found.group(1), found.group(2)
        stop = system.cli("collab", "--stop", session)
        assert await stop.wait_exit(30) in (0, 130), stop.lines
        stop.close()
        assert await say.wait_exit(30) == 130, say.lines  # its session ended canceled
        approve = system.cli("approvals", "approve", approval_id, "--session", session)
        await approve.wait_exit(30)
        approve.close()
        told = approve.lines[-1] if approve.lines else ""
        assert told.startswith("approved: File.Write FAILED"), approve.lines
        assert not list(workspaces.glob("*/zeta.txt")), "the step ran in an ended session"
        system.assert_healthy()
    finally:
        say.close()
