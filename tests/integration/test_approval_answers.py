"""`parley approvals approve|reject` of a request it cannot decide answers at once, every
process its own user.

A decision naming an id no request has, a request decided already, or one that expired is
answered by the tool runtime on the person's own timeline, so the command prints the outcome
(`APPROVAL_NOT_FOUND`, `APPROVAL_ALREADY_DECIDED` and how) and exits 1 within `PROMPTLY`,
half the 30 s it used to wait for a step end that never came; the owner's approval of a held
request still runs it and exits 0. Another person's decision is tests/security/
test_approval_strangers.py's.

The system is tests/support/tool_system.py's: `keeper` writes only with a person's approval
and deletes only with one given within two seconds.
"""

from __future__ import annotations

import re

from schemas import new_id
from tests.support.processes import ProcessOutput
from tests.support.tool_system import ToolSystem

DECIDE = re.compile(r"approve: parley approvals approve (\S+) --session (\S+)")
PROMPTLY = 15.0
"""How long a decision's command may take to answer (it used to wait 30 s for nothing)."""
_AT = r"at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"


async def test_a_decision_that_cannot_apply_is_answered_at_once(tool_system: ToolSystem) -> None:
    system, workspaces = tool_system, tool_system.workspaces
    opened: list[ProcessOutput] = []

    def cli(*argv: str) -> ProcessOutput:
        process = system.cli(*argv)
        opened.append(process)
        return process

    async def held(goal: str) -> tuple[ProcessOutput, str, str]:
        say = cli("say", "@keeper", goal)
        _, line = await say.wait_line(DECIDE.pattern, timeout=30)
        found = DECIDE.search(line)
        assert found is not None
        return say, found.group(1), found.group(2)

    async def decided(verb: str, approval_id: str, session: str) -> tuple[int, str]:
        """Decide, and return the exit code and the last line, or fail after PROMPTLY."""
        command = cli("approvals", verb, approval_id, "--session", session)
        code = await command.wait_exit(PROMPTLY)
        command.close()  # exited: this reads its output to the end
        return code, command.lines[-1] if command.lines else ""

    await tool_system.agent("keeper")
    try:
        say, approval_id, session = await held("gamma")
        # An id no request has: answered, and the held request is left as it was.
        unknown = new_id()
        code, line = await decided("approve", unknown, session)
        assert code == 1, line
        assert line == (
            f"not applied: APPROVAL_NOT_FOUND: no tool request of yours is held as {unknown!r}"
        )
        assert not list(workspaces.glob("*/gamma.txt"))
        # The owner's approval runs it, as before.
        code, line = await decided("approve", approval_id, session)
        assert (code, line) == (0, "approved: File.Write SUCCEEDED"), line
        assert await say.wait_exit(60) == 0, "\n".join(say.lines)
        # Decided already, approved: said, with who and when, whichever way it is decided again.
        for verb in ("approve", "reject"):
            code, line = await decided(verb, approval_id, session)
            assert code == 1, line
            assert re.fullmatch(
                f"not applied: APPROVAL_ALREADY_DECIDED: tool request {approval_id} was decided "
                f"already: approved by cli {_AT}",
                line,
            ), line
        # Rejected: said so ("rejectd" it was), and nothing written.
        say, approval_id, session = await held("epsilon")
        code, line = await decided("reject", approval_id, session)
        assert code == 0 and line.startswith("rejected: File.Write DENIED"), line
        assert await say.wait_exit(60) in (0, 1), say.lines
        assert not list(workspaces.glob("*/epsilon.txt"))
        # Expired: nobody decided the delete within its rule's two seconds.
        say, approval_id, session = await held("delete")
        assert await say.wait_exit(60) == 0
        assert "not decided in time" in "\n".join(say.lines), say.lines
        code, line = await decided("approve", approval_id, session)
        assert code == 1, line
        assert re.fullmatch(
            f"not applied: APPROVAL_ALREADY_DECIDED: tool request {approval_id} was decided "
            f"already: expired {_AT}: not decided in time",
            line,
        ), line
        system.assert_healthy()
    finally:
        for process in opened:
            process.close()
