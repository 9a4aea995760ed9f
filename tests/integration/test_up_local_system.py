"""`parley up` with no argument, in a directory that is not the checkout, runs the real system.

A newcomer's `parley up` used to start two echo actors and the console, and outside the
checkout it could not find its topology at all. Now it starts the gate, the router, the
auditor, every shipped agent (scripted) and the console, locked down, with the demo
policy signed by a key of the system's own and published, so the README's next command works
as it is: a collaboration reaches `final`, the audit history verifies with the local key, and
`parley audit query` finds the session without being told a tenant. A restart keeps the policy that
is stored (a person's own bundle survives), publishing nothing.
"""

from __future__ import annotations

import re
import signal
import uuid
from pathlib import Path

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers import get_message_text
from a2a.types import (
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskState,
)

from tests.support.processes import REPO, close_up, parley_env, parley_up
from tests.support.system import finished, parley_cli

pytestmark = pytest.mark.chaos

AGENTS = ("gpt", "claude", "local", "planner", "researcher", "coder", "reviewer")
ACTORS = ("gate", "router", "auditor", *AGENTS, "tools", "llm", "console", "a2a")
GOAL = "Collaborate to outline and refine a 5-step plan for a weekend hiking trip."


async def _ask_over_a2a(url: str, token: str, agent: str, text: str) -> tuple[int, str]:
    """Send `text` to `agent` through the A2A edge at `url` with the official SDK's client:
    the final task's state and message."""
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        config = ClientConfig(httpx_client=http, streaming=False)  # one answer: the task at its end
        client = await create_client(f"{url}/agents/{agent}/", config)
        try:
            message = Message(
                role=Role.ROLE_USER, parts=[Part(text=text)], message_id=uuid.uuid4().hex
            )
            waited = SendMessageConfiguration(return_immediately=False)  # to the task's end
            request = SendMessageRequest(message=message, configuration=waited)
            responses = [r async for r in client.send_message(request)]
        finally:
            await client.close()
    task = [r.task for r in responses if r.HasField("task")][-1]
    return task.status.state, get_message_text(task.status.message)


def _env() -> dict[str, str]:
    env = parley_env("unused", "parley")
    del env["NATS_URL"], env["PARLEY_NAMESPACE"]  # as a person's shell: nothing set
    return env


async def test_parley_up_with_no_argument_runs_the_system_the_readme_talks_to(
    tmp_path: Path,
) -> None:
    env = _env()
    up = parley_up(None, env, cwd=tmp_path)
    try:
        await up.wait_line(
            r"^\[nats\] published deploy/policy/demo.toml as policy version 1", timeout=60
        )
        await up.wait_line(rf"^\[nats\] ready: {', '.join(ACTORS)};", timeout=90)
        # Where the console is, on parley up's own line (on the ready line, or said after it
        # when the console told it later), not only among the actors' JSON.
        await up.wait_line(r"^\[nats\] .*the console: http://127\.0\.0\.1:\d+/", timeout=30)
        code, said = await finished(parley_cli(env, "collab", GOAL, cwd=tmp_path), 90)
        assert code == 0, said
        assert said[-1].startswith("stopped: final"), said
        session = said[0].split()[1].rstrip(":")
        query = parley_cli(env, "audit", "query", "--session", session, cwd=tmp_path)
        code, records = await finished(query, 60)
        assert code == 0 and "session_completed" in "\n".join(records), records
        code, verified = await finished(parley_cli(env, "audit", "verify", cwd=tmp_path), 60)
        assert code == 0, verified
        # The A2A edge runs too: alice signs a client in and asks gpt, which the bundle exposes.
        _, listening = await up.wait_line(r'"msg":"a2a listening"', timeout=30)
        url = re.search(r'"url":"(http://[^"]+)"', listening)
        assert url is not None, listening
        token_command = parley_cli(env, "a2a", "token", "--client", "alice", cwd=tmp_path)
        code, issued = await finished(token_command, 30)
        assert code == 0, issued
        (token,) = [line for line in issued if line and " " not in line]
        state, text = await _ask_over_a2a(url.group(1), token, "gpt", "Say hello")
        assert state == TaskState.TASK_STATE_COMPLETED, text
        assert text, "gpt's answer, as the task's final message"
        up.signal(signal.SIGINT)
        assert await up.wait_exit(timeout=30) == 0
    finally:
        close_up(up)
    again = parley_up(None, env, cwd=tmp_path)
    try:
        await again.wait_line(r"^\[nats\] ready: ", timeout=90)
        assert not [line for line in again.lines if "published" in line]
        code, said = await finished(parley_cli(env, "say", "@gpt", "hello", cwd=tmp_path), 60)
        assert code == 0, said
        again.signal(signal.SIGINT)
        assert await again.wait_exit(timeout=30) == 0
    finally:
        close_up(again)


async def test_an_open_broker_system_publishes_its_policy_and_talks(tmp_path: Path) -> None:
    """`parley up --open-broker` (docs/commands.md) published the bundle before anything had
    made the policy's bucket, and exited 2 telling the person to run `parley up`."""
    env = _env()
    up = parley_up(REPO / "examples" / "collaborate", env, "--open-broker", cwd=tmp_path)
    try:
        await up.wait_line(r"^\[nats\] published .* as policy version 1", timeout=60)
        await up.wait_line(r"^\[nats\] ready: ", timeout=90)
        code, said = await finished(parley_cli(env, "collab", GOAL, cwd=tmp_path), 90)
        assert code == 0 and said[-1].startswith("stopped: final"), said
        up.signal(signal.SIGINT)
        assert await up.wait_exit(timeout=30) == 0
    finally:
        close_up(up)
