"""A tool request that needs approval waits for its owner, every process its own user.

The agent's File.Write and File.Delete require approval (seed 002 §13.4). `parley say` prints
the held request with the two commands that decide it; another person's decision changes
nothing (and is told no request of theirs has that id), the owner's `parley approvals
approve` runs the write, that approval replayed while the next write waits decides nothing
(and is told so), `reject` denies the next one, and a delete nobody decides is denied when
its rule's timeout passes. Nothing is written that was not approved.

The system is tests/support/tool_system.py's, shared with the other end-to-end tool tests:
the agent `keeper` is this test's own, and its bundle profile holds the approval rules.
A decision that must change nothing is shown ignored by the runtime's own record of ignoring
it (an event), not by a while of nothing happening.
"""

from __future__ import annotations

import re

from tests.support.processes import ProcessOutput
from tests.support.tool_system import ToolSystem

_DECIDE = re.compile(r"approve: parley approvals approve (\S+) --session (\S+)")
_IGNORED = '"msg":"a decision from someone who does not own the request was ignored".*"{}"'
_DECIDED_ALREADY = '"msg":"a decision on a request decided already".*"{}"'


async def test_held_writes_wait_for_their_owner_and_nothing_else(tool_system: ToolSystem) -> None:
    system, workspaces = tool_system, tool_system.workspaces
    runtime = system.processes["tools"]
    opened: list[ProcessOutput] = []

    def cli(*argv: str, who: str = "cli") -> ProcessOutput:
        process = system.cli(*argv, who=who)
        opened.append(process)
        return process

    async def held(goal: str) -> tuple[ProcessOutput, str, str]:
        say = cli("say", "@keeper", goal)
        _, line = await say.wait_line(_DECIDE.pattern, timeout=30)
        found = _DECIDE.search(line)
        assert found is not None
        return say, found.group(1), found.group(2)

    async def runtime_says(pattern: str, approval_id: str, since: int) -> None:
        await runtime.wait_line(pattern.format(re.escape(approval_id)), start=since, timeout=30)

    await tool_system.agent("keeper")
    try:
        # Approved by its owner, after another person's approval was ignored.
        say, approval_id, session = await held("alpha")
        assert not list(workspaces.glob("*/alpha.txt"))  # held: nothing written yet
        decide = ("approvals", "approve", approval_id, "--session", session)
        since = len(runtime.lines)
        bob = cli(*decide, who="person-bob")  # not his: no request of his has that id
        await runtime_says(_IGNORED, approval_id, since)
        assert await bob.wait_exit(60) == 1, "\n".join(bob.lines)
        bob.close()  # exited: this reads its output to the end
        assert "APPROVAL_NOT_FOUND" in bob.lines[-1], bob.lines
        assert not list(workspaces.glob("*/alpha.txt"))
        approve = cli("approvals", "approve", approval_id, "--session", session)
        assert await approve.wait_exit(60) == 0, "\n".join(approve.lines)
        assert "approved: File.Write SUCCEEDED" in approve.lines[-1]
        assert await say.wait_exit(60) == 0, "\n".join(say.lines)
        (written,) = workspaces.glob("*/alpha.txt")
        assert written.read_text() == "written for alpha"
        # A decision replayed: alpha's approval, sent again naming beta's session, decides
        # nothing (alpha's is decided, and an approval names one request only).
        alpha_id = approval_id
        say, approval_id, session = await held("beta")
        since = len(runtime.lines)
        replay = cli("approvals", "approve", alpha_id, "--session", session)
        await runtime_says(_DECIDED_ALREADY, alpha_id, since)
        assert await replay.wait_exit(60) == 1, "\n".join(replay.lines)
        replay.close()  # exited: this reads its output to the end
        assert "APPROVAL_ALREADY_DECIDED" in replay.lines[-1], replay.lines
        assert not list(workspaces.glob("*/beta.txt"))
        # Rejected: denied, nothing written.
        reject = cli("approvals", "reject", approval_id, "--session", session, "--reason", "no")
        assert await reject.wait_exit(60) == 0, "\n".join(reject.lines)
        assert await say.wait_exit(60) == 0
        assert "APPROVAL_DENIED" in "\n".join(say.lines), say.lines
        assert not list(workspaces.glob("*/beta.txt"))
        # Nobody decides: the rule's two seconds pass and the delete is denied.
        say, _, _ = await held("delete")
        assert await say.wait_exit(60) == 0
        assert " expired: not decided in time" in "\n".join(say.lines), say.lines  # not "was"
        system.assert_healthy()
    finally:
        for process in opened:
            process.close()
