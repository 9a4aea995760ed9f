"""A session's workspace is its person's: another who names the session reaches none of it.

An attack review, holding bob's credentials, delegated to an agent naming alice's session as
the request's parent session: the gate takes a root's session from the sender's claim, and the
tool runtime names a workspace by its session id alone, so the agent read alice's file and
wrote over it in bob's name; the console then showed bob her patch preview. The first step run
in a workspace now claims it for the person its trace works for, and a step for anyone else is
refused `SESSION_NOT_FOUND` (actors/tools/_workspace_owner.py).

The system is tests/support/tool_system.py's, every process its own user; `cli` plays alice,
and bob may delegate to `gpt`, whose script writes `notes/today.txt`, then reads it back.
"""

from __future__ import annotations

import json
import re

from actors.delegation import Delegate, request_envelope
from bus import TraceHeaders
from schemas import encode, hop_delta_for, new_id
from tests.support.system import finished
from tests.support.tool_system import ToolSystem

BOB = "person-bob"
OPENED = re.compile(r"^session (\S+): gpt")


async def test_a_step_in_another_persons_session_is_refused_and_changes_nothing(
    tool_system: ToolSystem,
) -> None:
    system = tool_system
    await system.agent("gpt")
    code, lines = await finished(system.cli("say", "@gpt", "her notes"))
    assert code == 0, lines
    session = next(found.group(1) for line in lines if (found := OPENED.match(line)))
    hers = system.workspaces / session / "notes" / "today.txt"
    hers.write_text("ALICE-PRIVATE: the password is hunter2")

    gpt, tools = system.processes["gpt"], system.processes["tools"]
    start, tools_start = len(gpt.lines), len(tools.lines)
    request_id = new_id()
    delegate = Delegate(request_id=request_id, target_employee="gpt", objective="read her notes")
    request = request_envelope(
        delegate, envelope_id=request_id, sender=BOB, user_id="", session_id=session, depth=0
    )
    position = TraceHeaders(trace_id=request_id, hop_count=hop_delta_for(request), origin=BOB)
    headers = position.to_headers(request_id)
    nc = await system.locked.connect(BOB)
    try:
        await system.locked.js(nc, BOB).publish(
            system.locked.ns.submit(BOB), encode(request), headers=headers
        )
    finally:
        await nc.close()

    # gpt answers bob once its steps came back: each refused, none run.
    await gpt.wait_line(f'"answered".*"call_id":"{request_id}"', start=start, timeout=60)
    ran = [line for line in tools.lines[tools_start:] if "step started" in line]
    assert not ran, ran
    assert hers.read_text() == "ALICE-PRIVATE: the password is hunter2"
    answered = [json.loads(line) for line in gpt.lines[start:] if "brain asked" in line]
    assert answered, gpt.lines[start:]
    system.assert_healthy()
