"""`parley mcp` answers the `mcp` SDK's own client, as a person's assistant would use it.

One locked-down `parley up` for the module, in a directory of its own that sees the
repository's deploy/ folder: the gate, the router, gpt and claude (scripted), and the
researcher for delegations, each process its own nkey user; alice holds a console token, so
`parley up` writes her credentials too. Every server is a real `parley mcp` process: over
stdio, started by the SDK's client exactly as docs/interop.md's `mcpServers` snippet says,
and over streamable HTTP behind its bearer token. Each finds the system and its credentials
under `.parley/` as `parley say` does, so every call crosses the real gate.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.support.processes import READY, REPO, SUPPORT_PATH, ProcessOutput, close_up, parley_up
from tools.cli import _parser
from tools.demo import DEMO_GOAL, sign_policy

pytestmark = [pytest.mark.timeout(240)]

ACTORS = ("gate", "router", "gpt", "claude", "researcher")
TOPOLOGY = (
    """
intensity = 5
period_s = 30.0

[[actor]]
name = "gate"
run = "gate"
config = "gate.toml"
"""
    + "".join(
        f'\n[[actor]]\nname = "{name}"\nrun = "{run}"\n'
        for name, run in (("router", "router"), ("gpt", "agent"), ("claude", "agent"))
    )
    + '\n[[actor]]\nname = "researcher"\nrun = "agent"\n'
)
GATE = '[options]\npolicy_keys = ["keys/policy.pub"]\ntenant = "demo"\n'
STARTUP_S = 90.0
TOOLS = {"say", "collab", "delegate", "session_status", "stop_session"}
SUMMARY = "Summarize this in 1 sentence, then stop."
HIKING = "Collaborate to outline and refine a 5-step plan for a weekend hiking trip."


@dataclass(frozen=True)
class Local:
    home: Path
    env: dict[str, str]


def _parley(env: dict[str, str], cwd: Path, *argv: str) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-m", "tools", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=STARTUP_S,
        check=False,
    )
    return done.returncode, (done.stdout + done.stderr).splitlines()


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Local]:
    home = tmp_path_factory.mktemp("mcp")
    (home / "deploy").symlink_to(REPO / "deploy")  # the agents' profiles and scripts
    (home / "system.toml").write_text(TOPOLOGY)
    (home / "gate.toml").write_text(GATE)
    signed, _ = sign_policy(REPO / "deploy/policy/demo.toml", home / "keys")
    (home / "demo.signed.json").write_bytes(signed)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "PARLEY_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SUPPORT_PATH, env.get("PYTHONPATH")]))
    code, said = _parley(env, home, "console", "token", "--person", "alice")
    assert code == 0, said  # alice: credentials of her own (person-alice)
    up = parley_up(home / "system.toml", env, cwd=home)
    try:
        for actor in ACTORS:
            up.wait_line_sync(rf"^\[{actor}\] .*{READY}", timeout=STARTUP_S)
        code, said = _parley(env, home, "policy", "publish", "demo.signed.json")
        assert code == 0, said
        up.wait_line_sync(r"^\[gate\] .*policy bundle in force", timeout=STARTUP_S)
        yield Local(home, env)
        up.signal(signal.SIGINT)
        up.process.wait(30)
    finally:
        close_up(up)


def _stdio_snippet() -> dict[str, Any]:
    """docs/interop.md's stdio `mcpServers` snippet, as an assistant reads it."""
    text = (REPO / "docs" / "interop.md").read_text()
    section = text[text.index("### Over stdio") :]
    block = re.search(r"```json\n(.*?)```", section, re.DOTALL)
    assert block is not None
    server: dict[str, Any] = json.loads(block.group(1))["mcpServers"]["parley"]
    return server


@asynccontextmanager
async def _stdio(local: Local, *extra: str) -> AsyncIterator[ClientSession]:
    """A session with `parley mcp` started as the docs' snippet says: its command (`parley`,
    here the checkout's own) and its arguments, the project directory being `local.home`;
    with the SDK's default environment, as an assistant starts it."""
    snippet = _stdio_snippet()
    command = Path(sys.executable).with_name(snippet["command"])
    args = [str(local.home) if a == "/path/to/your/project" else a for a in snippet["args"]]
    params = StdioServerParameters(command=str(command), args=[*args, *extra])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def _call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


async def _error(session: ClientSession, tool: str, **arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result
    [content] = result.content
    text: str = getattr(content, "text", "")
    assert "\n" not in text and "Traceback" not in text, text
    return text


def test_the_docs_snippet_names_a_real_command() -> None:
    snippet = _stdio_snippet()
    assert snippet["command"] == "parley", snippet
    assert Path(sys.executable).with_name("parley").is_file()  # the package's entry point
    args = _parser().parse_args(snippet["args"])
    assert (args.command, args.dir) == ("mcp", Path("/path/to/your/project")), args


async def test_an_assistant_says_collaborates_delegates_and_follows_status(local: Local) -> None:
    async with _stdio(local) as session:
        listed = await session.list_tools()
        assert {tool.name for tool in listed.tools} == TOOLS
        said = await _call(session, "say", agent="@gpt", text=SUMMARY)
        assert said["state"] == "completed", said
        assert said["answer"] == f"In one sentence: {SUMMARY}", said
        tale = await _call(
            session,
            "collab",
            goal=DEMO_GOAL,
            agents=["gpt", "claude"],
            first="claude",
            max_rounds=4,
        )
        assert (tale["state"], tale["stop_reason"], tale["round"]) == ("completed", "final", 4)
        assert [turn["speaker"] for turn in tale["turns"]] == ["claude", "gpt", "claude", "gpt"]
        status = await _call(session, "session_status", session_id=tale["session_id"])
        assert status["state"] == "completed" and status["turns"] == tale["turns"], status
        assert status["events"][-1]["type"] == "session_completed", status
        asked = await _call(session, "delegate", agents=["researcher"], objective="the CSV parser")
        [answer] = asked["delegations"]
        assert (asked["state"], answer["status"]) == ("completed", "success"), asked
        assert answer["result"].startswith('researcher on "the CSV parser"'), answer
        # A wait that ends first says the session runs on, and under which id.
        left = await _call(session, "say", agent="gpt", text=SUMMARY, wait_s=0)
        assert left["state"] in ("submitted", "running"), left
        assert left["session_id"] in left["note"], left
        stopped = await session.call_tool("stop_session", {"session_id": left["session_id"]})
        assert not stopped.is_error, stopped
        ended = getattr(stopped.content[0], "text", "")
        assert re.fullmatch(rf"session {left['session_id']} ended: \w+ \(\w+\)", ended), ended
        refused = await _error(session, "say", agent="gpt", text="hi", wait_s=601)
        assert refused == "wait_s must be within 0..600, got 601", refused
        typed = await _error(session, "say", agent="gpt", text="hi", wait_s="soon")
        assert "wait_s" in typed and "valid number" in typed, typed  # pydantic's, in one line


async def test_one_persons_server_cannot_read_or_stop_anothers_session(local: Local) -> None:
    alice_config = str(local.home / ".parley" / "broker" / "actors" / "person-alice.toml")
    async with _stdio(local, "--config", alice_config) as alice, _stdio(local) as cli:
        mine = await _call(cli, "collab", goal=HIKING, agents=["gpt", "claude"])
        session_id = mine["session_id"]
        assert mine["state"] == "completed", mine
        # alice's server followed her timelines all along: the broker never showed her cli's.
        unseen = await _error(alice, "session_status", session_id=session_id)
        assert unseen.startswith(f"no session {session_id} seen here"), unseen
        stop = await _error(alice, "stop_session", session_id=session_id)
        assert (
            "person-alice cannot stop a session it did not open" in stop and "opened by" not in stop
        ), stop
        assert (await _call(cli, "session_status", session_id=session_id))["state"] == "completed"
        # Her own sessions she reads and stops as any person does.
        hers = await _call(alice, "say", agent="gpt", text=SUMMARY)
        assert hers["state"] == "completed", hers
        stopped = await alice.call_tool("stop_session", {"session_id": hers["session_id"]})
        assert not stopped.is_error, stopped


async def test_streamable_http_wants_the_bearer_token_and_answers_with_it(local: Local) -> None:
    server = ProcessOutput(
        [sys.executable, "-m", "tools", "mcp", "--http", "0"],
        local.env,
        name="mcp",
        cwd=local.home,
    )
    try:
        _, line = await server.wait_line(r"serving cli's tools at (http://\S+/mcp)", timeout=60)
        url = re.search(r"(http://\S+/mcp)", line).group(1)  # type: ignore[union-attr]
        token = (local.home / ".parley" / "mcp-cli.token").read_text().strip()
        async with httpx2.AsyncClient(trust_env=False) as anonymous:
            refused = await anonymous.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert refused.status_code == 401, refused
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(trust_env=False, headers=headers, timeout=120) as client,
            streamable_http_client(url, http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            said = await _call(session, "say", agent="gpt", text=SUMMARY)
        assert said["answer"] == f"In one sentence: {SUMMARY}", said
    finally:
        server.close()
