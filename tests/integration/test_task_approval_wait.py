"""A task's tool request held for its owner's approval, against the clocks around it.

The router's turn timeout is 10 s here. alice's first task asks for a File.Write that needs
her approval, and she approves only once the turn's deadline has passed: the router moved
the call's deadline while the request was held (actors/router/_approval_wait.py), so the
task completes and the write runs once. Her second task's agent waits only 6 s for its
write (the host's `deadline_ms`, told to the runtime as the request's `Parley-Deadline`),
then answers without it, and the task ends. The request is held only that long, not its
rule's 300 s: the gate tells her so (`expires_in_s`), the runtime denies it then (or lets it
go with the task, whichever comes first), and her approval after that applies to nothing
(the runtime's own deadline check, for a session that goes on past a step's deadline, is
tests/unit/test_tool_request_deadline.py's). Every process is real, under the least-privilege
broker config.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import datetime

import pytest

from schemas import Namespace, utc_now
from tests.support.system import finished, parley_cli
from tests.support.task_socket import TaskSocket, signed_in, start_task
from tests.support.task_system import LATE_GOAL, TaskDeployment, task_deployment

pytestmark = pytest.mark.timeout(180)

_TURN_TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
async def deployment(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TaskDeployment]:
    root = tmp_path_factory.mktemp("approval-wait")
    namespace = Namespace(f"t{uuid.uuid4().hex[:12]}")
    async with task_deployment(root, namespace, turn_timeout_s=_TURN_TIMEOUT_S) as deployed:
        yield deployed


async def _until_past(moment: datetime) -> None:
    """Let the wall clock pass `moment`: what these tests are about is time itself passing,
    so this waits for the clock, never for another process."""
    await asyncio.sleep(max(0.0, (moment - utc_now()).total_seconds()) + 0.5)


async def _approve(alice: TaskSocket, session_id: str, approval_id: str) -> None:
    decided = await alice.call(
        "ApproveAction", sessionId=session_id, approvalId=approval_id, decision="approved"
    )
    assert decided["result"]["state"] == "decision_sent", decided


def _step_runs(deployment: TaskDeployment, session_id: str) -> list[str]:
    return [
        line
        for line in deployment.system.processes["tools"].lines
        if "step started" in line and session_id in line
    ]


async def test_an_approval_after_the_turn_timeout_still_completes_the_task(
    deployment: TaskDeployment,
) -> None:
    async with signed_in(deployment, "alice") as alice:
        session_id = await start_task(alice, "patient")
        started = await alice.event(session_id, "step_started")
        turn_deadline = datetime.fromisoformat(started["payload"]["deadline"])
        asked = await alice.event(session_id, "approval_requested")
        await _until_past(turn_deadline)
        state = (await alice.call("GetSessionState", sessionId=session_id))["result"]
        assert state["taskState"] == "WAITING_FOR_APPROVAL", state
        assert "session_failed" not in alice.events(session_id)

        await _approve(alice, session_id, asked["payload"]["approval_id"])
        await alice.event(session_id, "session_completed")
    assert "session_failed" not in alice.events(session_id)
    (written,) = deployment.workspaces.glob("*/patient.txt")
    assert written.read_text() == "written for patient\n"
    assert len(_step_runs(deployment, session_id)) == 1  # the write ran once
    moved = [
        line
        for line in deployment.system.processes["router"].lines
        if "its deadline moved" in line and session_id in line
    ]
    assert moved, "the router never moved the call's deadline"


async def test_a_request_is_held_no_longer_than_its_caller_waits(
    deployment: TaskDeployment,
) -> None:
    async with signed_in(deployment, "alice") as alice:
        session_id = await start_task(alice, LATE_GOAL)
        asked = await alice.event(session_id, "approval_requested")
        approval_id = asked["payload"]["approval_id"]
        # Her window is the host's 6 s wait, not the rule's 300 s: approved later, the step
        # would run for nobody.
        assert 0 <= asked["payload"]["expires_in_s"] <= 6, asked["payload"]
        tools = deployment.system.processes["tools"]
        _, held = await tools.wait_line(rf"held for approval.*{approval_id}")  # held, not run
        assert json.loads(held)["expires_in_s"] <= 6.0, held
        # The agent host waits 6 s for its write, then answers without it, and the task ends.
        # The runtime has denied the write as expired by then, or lets it go with the session
        # (actors/tools/_held_steps.py); a decision later than its expiry counts as expired.
        await alice.event(session_id, "session_completed")

    # The console offers nothing to decide in an ended task; alice's terminal still can.
    argv = ("approvals", "approve", approval_id, "--session", session_id)
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "tools", *argv, *deployment.config("person-alice")),
        env=deployment.system.env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    told = out.decode()
    assert process.returncode == 1, told
    assert "APPROVAL_ALREADY_DECIDED" in told, told
    assert "expired" in told or "session ended (completed)" in told, told
    assert _step_runs(deployment, session_id) == []
    assert not list(deployment.workspaces.glob(f"*/{LATE_GOAL}.txt"))


async def test_parley_say_waits_for_its_persons_decision_as_long_as_the_request_waits(
    deployment: TaskDeployment,
) -> None:
    """`parley say` judged its wait by the turn alone: with the request still held it gave up
    at the turn's deadline plus its slack (here about 25 s) and stopped the session. It waits
    as the router does now, a turn past the request's expiry (120 s), and the approval given
    then completes the session."""
    config = deployment.config("cli")
    say = parley_cli(deployment.system.env, "say", *config, "@gpt", "waited")
    try:
        _, approve = await say.wait_line(r"^  approve: parley approvals approve ", timeout=60)
        approval_id, session_id = re.findall(r"approve (\S+) --session (\S+)$", approve)[0]
        _, waiting = await say.wait_line(r"^waiting for your decision on ", timeout=30)
        patience = re.search(r"giving up after (\d+) s\)$", waiting)
        assert patience is not None and int(patience.group(1)) > 120, waiting
        argv = ("approvals", "approve", approval_id, "--session", session_id, *config)
        decided, told = await finished(parley_cli(deployment.system.env, *argv))
        assert decided == 0, told
        code = await say.wait_exit(60)
    finally:
        say.close()
    assert code == 0, "\n".join(say.lines)
    assert "gave up" not in "\n".join(say.lines), say.lines
    (written,) = deployment.workspaces.glob("*/waited.txt")
    assert written.read_text() == "written for waited\n"
