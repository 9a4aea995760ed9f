"""A person deciding someone else's tool request learns nothing of it, every process its own
user, each person with only their own credentials.

`person-bob` approves and rejects `cli`'s request, held and then decided, naming `cli`'s
session, and a request id nobody has. Each time the tool runtime answers him at once on his
own timeline, and the answer is the same, word for word but for the id, as for the id nobody
has: `APPROVAL_NOT_FOUND`, "no tool request of yours". Nothing is told on `cli`'s timeline,
and `cli`'s request is still held for `cli`, whose approval runs it. (That the broker lets
bob follow no timeline of `cli`'s is tests/security/test_two_people.py's.)
"""

from __future__ import annotations

import asyncio

from nats.aio.msg import Msg

from schemas import Error, decode_envelope, new_id
from tests.integration.test_approval_answers import DECIDE, PROMPTLY
from tests.support.processes import ProcessOutput
from tests.support.tool_system import ToolSystem

BOB = "person-bob"


async def test_a_stranger_learns_nothing_of_another_persons_request(
    tool_system: ToolSystem,
) -> None:
    system, workspaces = tool_system, tool_system.workspaces
    opened: list[ProcessOutput] = []
    told_bob: asyncio.Queue[object] = asyncio.Queue()

    def cli(*argv: str, who: str = "cli") -> ProcessOutput:
        process = system.cli(*argv, who=who)
        opened.append(process)
        return process

    async def on_bobs_timeline(raw: Msg) -> None:
        told_bob.put_nowait(decode_envelope(raw.data))  # judged in the test, not in here

    async def bob_decides(verb: str, approval_id: str, session: str) -> tuple[str, Error]:
        """Bob's command's last line and the answer he was sent, the id replaced by `ID`."""
        command = cli("approvals", verb, approval_id, "--session", session, who=BOB)
        assert await command.wait_exit(PROMPTLY) == 1
        command.close()  # exited: this reads its output to the end
        told = await asyncio.wait_for(told_bob.get(), PROMPTLY)
        assert isinstance(told, Error), told  # nothing but the answer is told him here
        assert told_bob.empty(), told_bob.get_nowait()
        return command.lines[-1].replace(approval_id, "ID"), told

    def seen_alike(answer: Error, approval_id: str) -> tuple[object, ...]:
        details = {k: v for k, v in answer.details.items() if k != "approval_id"}
        return answer.code, answer.message.replace(approval_id, "ID"), details

    await tool_system.agent("keeper")
    bob = await system.locked.connect(BOB)  # bob's own credentials, and nothing else
    try:
        await bob.subscribe(system.locked.ns.timelines(BOB), cb=on_bobs_timeline)
        await bob.flush()
        say = cli("say", "@keeper", "delta")
        _, line = await say.wait_line(DECIDE.pattern, timeout=30)
        found = DECIDE.search(line)
        assert found is not None
        held_id, session = found.group(1), found.group(2)
        unknown = new_id()
        nobodys, nobodys_answer = await bob_decides("approve", unknown, session)
        assert "APPROVAL_NOT_FOUND: no tool request of yours is held as 'ID'" in nobodys
        assert nobodys_answer.details["approval_id"] == unknown
        expected = seen_alike(nobodys_answer, unknown)
        for verb in ("approve", "reject"):
            line, answer = await bob_decides(verb, held_id, session)
            assert line == nobodys
            assert seen_alike(answer, held_id) == expected
        assert not list(workspaces.glob("*/delta.txt"))  # still held: nothing written
        # Nothing was told on the owner's timeline, which `cli`'s say follows.
        assert not [line for line in say.lines if "APPROVAL_" in line], say.lines
        approve = cli("approvals", "approve", held_id, "--session", session)
        assert await approve.wait_exit(60) == 0, "\n".join(approve.lines)
        assert await say.wait_exit(60) == 0, "\n".join(say.lines)
        (written,) = workspaces.glob("*/delta.txt")
        assert written.read_text() == "written for delta"
        # Decided now, and still nobody's to bob: not even that it was decided.
        line, answer = await bob_decides("reject", held_id, session)
        assert line == nobodys
        assert seen_alike(answer, held_id) == expected
        await bob.flush()
        assert told_bob.empty(), told_bob.get_nowait()  # nothing more was told him
        system.assert_healthy()
    finally:
        await bob.close()
        for process in opened:
            process.close()
