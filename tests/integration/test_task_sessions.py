"""Task sessions (seed 002 §7, §11, §18) through the console's JSON-RPC, every process real.

alice starts a task for `gpt`, whose File.Write waits for her approval. While it waits, the
router, the agent host, the tool runtime and the gate are SIGKILLed and restarted: the task
resumes from what they stored, asks the same step again under the same id, and the write runs
once, when alice approves. bob, another person, can neither read, cancel, resume, preview nor
approve her task, nor list or show what waits for her (`parley approvals list|show`). A
second task is cancelled while it waits. `parley task` does the same
from a terminal, with y/n answered on standard input.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nats.errors import NoRespondersError

from schemas import Namespace
from tests.support.task_socket import signed_in, start_task
from tests.support.task_system import TaskDeployment, task_deployment

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
async def deployment(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TaskDeployment]:
    root = tmp_path_factory.mktemp("tasks")
    async with task_deployment(root, Namespace(f"t{uuid.uuid4().hex[:12]}")) as deployed:
        yield deployed


def _refused_as_unknown(answer: dict[str, Any]) -> bool:
    return bool(answer.get("error", {}).get("data", {}).get("code") == "SESSION_NOT_FOUND")


async def test_a_task_waits_for_its_owner_survives_sigkill_and_writes_once(
    deployment: TaskDeployment,
) -> None:
    async with signed_in(deployment, "alice") as alice, signed_in(deployment, "bob") as bob:
        session_id = await start_task(alice, "alpha")
        asked = await alice.event(session_id, "approval_requested")
        approval_id = asked["payload"]["approval_id"]
        state = (await alice.call("GetSessionState", sessionId=session_id))["result"]
        assert state["taskState"] == "WAITING_FOR_APPROVAL"
        assert [a["approvalId"] for a in state["awaitingApproval"]] == [approval_id]
        assert "alpha.txt" in state["awaitingApproval"][0]["actionSummary"]

        # bob: not his session, whatever he asks; nothing of it is told to him.
        for method, extra in [
            ("GetSessionState", {}),
            ("ResumeSession", {}),
            ("GetPatchPreview", {}),
            ("CancelTask", {}),
            ("ApproveAction", {"approvalId": approval_id, "decision": "approved"}),
        ]:
            answer = await bob.call(method, sessionId=session_id, **extra)
            assert _refused_as_unknown(answer), (method, answer)
        assert bob.events(session_id) == []

        # Every actor the task runs through dies and comes back while it waits.
        for actor in ("router", "gpt", "tools", "gate"):
            await deployment.system.kill_and_restart(actor)
        assert not list(deployment.workspaces.glob("*/alpha.txt"))  # held: nothing written

        decided = await alice.call(
            "ApproveAction", sessionId=session_id, approvalId=approval_id, decision="approved"
        )
        assert decided["result"]["state"] == "decision_sent", decided
        again = await alice.call(
            "ApproveAction", sessionId=session_id, approvalId=approval_id, decision="approved"
        )
        assert again["error"]["data"]["code"] == "INVALID_REQUEST"  # decided once
        resolved = await alice.event(session_id, "approval_resolved")
        assert resolved["payload"]["decision"] == "approved"
        await alice.event(session_id, "session_completed")

        state = (await alice.call("GetSessionState", sessionId=session_id))["result"]
        assert state["taskState"] == "SESSION_COMPLETED"
        tool_steps = [s for s in state["steps"] if s["stepKind"] == "tool_call"]
        assert [(s["stepId"], s["status"]) for s in tool_steps] == [(approval_id, "succeeded")]
        (written,) = deployment.workspaces.glob("*/alpha.txt")
        assert written.read_text() == "written for alpha\n"
        runs = [
            line
            for line in deployment.system.processes["tools"].lines
            if "step started" in line and session_id in line and "File.Write" in line
        ]
        assert len(runs) == 1, runs  # the restarted runtime ran it, once
        preview = (await alice.call("GetPatchPreview", sessionId=session_id))["result"]
        assert "+written for alpha" in preview["patch"]
        resumed = (await alice.call("ResumeSession", sessionId=session_id))["result"]
        assert resumed["session"]["taskState"] == "SESSION_COMPLETED"
        assert {"session_started", "approval_requested", "tool_completed"} <= {
            e["eventType"] for e in resumed["events"]
        }


async def _approvals(deployment: TaskDeployment, who: str, *argv: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "tools", "approvals", *argv, *deployment.config(who)),
        env=deployment.system.env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode()


async def _held_no_more(
    deployment: TaskDeployment, approval_id: str, who: str = "person-alice"
) -> None:
    """Until `parley approvals list` no longer shows `who` `approval_id` (the runtime keeps
    the list in a bucket, read here as they read it; no event tells its change)."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        code, out = await _approvals(deployment, who, "list")
        if code == 0 and approval_id not in out:
            return
        assert asyncio.get_running_loop().time() < deadline, out
        await asyncio.sleep(0.5)


async def _only_alice_lists(deployment: TaskDeployment, approval_id: str, session_id: str) -> None:
    """`parley approvals list|show` shows alice her held request, and bob nothing of it."""
    code, out = await _approvals(deployment, "person-alice", "list")
    assert code == 0 and approval_id in out and "beta.txt" in out, out
    code, out = await _approvals(deployment, "person-alice", "show", approval_id)
    assert code == 0 and f"session: {session_id}" in out and "risk medium" in out, out
    code, out = await _approvals(deployment, "person-bob", "list")
    assert (code, approval_id in out) == (0, False), out
    code, out = await _approvals(deployment, "person-bob", "show", approval_id)
    assert code == 1 and out.startswith("parley approvals show: no tool request awaits"), out
    # bob asking the broker for alice's list himself: refused, nothing comes back.
    locked = deployment.locked
    nc = await locked.connect("person-bob")
    try:
        runs = locked.ns.bucket("tool_runs")
        api = locked.settings("person-bob").js_api_prefix
        with pytest.raises((TimeoutError, NoRespondersError)):
            await nc.request(
                f"{api}.DIRECT.GET.KV_{runs}.$KV.{runs}.pending.person-alice", b"", timeout=2
            )
    finally:
        await nc.close()


async def test_a_waiting_task_is_cancelled_by_its_owner_only(deployment: TaskDeployment) -> None:
    async with signed_in(deployment, "alice") as alice, signed_in(deployment, "bob") as bob:
        session_id = await start_task(alice, "beta")
        asked = await alice.event(session_id, "approval_requested")
        await _only_alice_lists(deployment, asked["payload"]["approval_id"], session_id)
        assert _refused_as_unknown(await bob.call("CancelTask", sessionId=session_id))
        cancel = await alice.call("CancelTask", sessionId=session_id, reason="changed my mind")
        assert cancel["result"]["state"] == "cancel_requested"
        await alice.event(session_id, "session_canceled")
        state = (await alice.call("GetSessionState", sessionId=session_id))["result"]
        assert state["taskState"] == "SESSION_CANCELLED"
        # What the task held for her is rejected with it: held on, it stayed on her list and
        # counted among gpt's calls in flight until it expired (a newcomer's walk).
        await _held_no_more(deployment, asked["payload"]["approval_id"])
        signed_out = await bob.call("Shutdown")
        assert signed_out["result"] == {"signedOut": True}
    async with signed_in(deployment, "alice") as alice:  # bob's Shutdown stopped only bob
        listed = (await alice.call("ListSessions"))["result"]["sessions"]
        assert session_id in [s["sessionId"] for s in listed]


async def test_parley_task_asks_inline_and_follows_to_the_end(deployment: TaskDeployment) -> None:
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "tools", "task", "@gpt", "gamma", *deployment.config("cli")),
        env=deployment.system.env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdin is not None and process.stdout is not None
    lines: list[str] = []

    async def line_with(text: str) -> None:
        while not lines or text not in lines[-1]:
            raw = await asyncio.wait_for(process.stdout.readline(), 90)  # type: ignore[union-attr]
            assert raw, "\n".join(lines)
            lines.append(raw.decode().rstrip("\n"))

    try:
        await line_with("approve? [y]es / [n]o / [e]xplain instead")
        process.stdin.write(b"y\n")
        await line_with("SESSION_COMPLETED")
        assert await asyncio.wait_for(process.wait(), 30) == 0, "\n".join(lines)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    text = "\n".join(lines)
    assert "File.Write" in text and "SUCCEEDED" in text, text
    (written,) = deployment.workspaces.glob("*/gamma.txt")
    assert written.read_text() == "written for gamma\n"


async def test_parley_task_stopped_by_ctrl_c_rejects_what_it_held(
    deployment: TaskDeployment,
) -> None:
    """The walk's own case: Ctrl-C at `parley task`'s first approval; its held write stayed
    held, and the next task was refused `RATE_LIMITED` while it did."""
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "tools", "task", "@gpt", "epsilon", *deployment.config("cli")),
        env=deployment.system.env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    lines: list[str] = []
    try:
        while not lines or "approve? [y]es" not in lines[-1]:
            raw = await asyncio.wait_for(process.stdout.readline(), 90)
            assert raw, "\n".join(lines)
            lines.append(raw.decode().rstrip("\n"))
        code, listed = await _approvals(deployment, "cli", "list")
        assert code == 0 and "epsilon.txt" in listed, listed
        (held,) = [line.split()[0] for line in listed.splitlines() if "epsilon.txt" in line]
        process.send_signal(signal.SIGINT)
        out, _ = await asyncio.wait_for(process.communicate(), 60)
        lines += out.decode().splitlines()
        assert process.returncode == 130, "\n".join(lines)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert "rejected: the tool runtime is told" in lines, lines
    await _held_no_more(deployment, held, "cli")
    assert not list(deployment.workspaces.glob("*/epsilon.txt"))
