"""The console under `parley up` with no argument, as a newcomer meets it: the local system
(gate, router, auditor, every shipped agent, the console with the audit reader's settings file), a
person's token issued first, everything in a directory of its own and nothing in the shell.

The console's Trace and "My audit records" must read the audit: they used to fail with "the
audit cannot be read now: " and nothing after it, while the broker logged permission
violations on `_inbox_audit-cli…` from the console (the audit reader's connection took the
console's own nkey from the process's environment). And a browser's connection must leave
no "--- Logging error ---" traceback and no deprecation warning in `parley up`'s output.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.typing import Origin

from tests.support.processes import READY, SUPPORT_PATH, ProcessOutput, close_up, parley_up
from tests.support.system import finished, parley_cli
from tools._local_system import LOCAL_SYSTEM

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]

ACTORS = ("gate", "router", "auditor", "gpt", "claude", "llm", "console")
PROVIDER_KEY = "sk-only-the-gateway-holds-this-0123"
GOAL = "Summarize this in 1 sentence, then stop."


@dataclass
class LocalConsole:
    up: ProcessOutput
    url: str
    token: str
    home: Path


def _env() -> dict[str, str]:
    """A person's shell: no NATS_URL, no namespace, nothing but the tests' support path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "PARLEY_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SUPPORT_PATH, env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="module")
async def local(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalConsole]:
    home = tmp_path_factory.mktemp("console-local")
    env = _env()
    env["OPENAI_API_KEY"] = PROVIDER_KEY  # a person's shell with a provider key exported
    code, said = await finished(parley_cli(env, "console", "token", "--person", "alice", cwd=home))
    assert code == 0, said
    token = said[0].strip()
    up = parley_up(None, env, cwd=home)
    try:
        for actor in ACTORS:
            await up.wait_line(rf"^\[{actor}\] .*{READY}", timeout=90)
        await up.wait_line(r"^\[gate\] .*policy bundle in force", timeout=60)
        url = (home / ".parley" / "console.url").read_text().strip()
        yield LocalConsole(up, url, token, home)
    finally:
        close_up(up)


class _Socket:
    """A signed-in WebSocket: calls, and the notifications seen meanwhile."""

    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket
        self.next_id = 1
        self.events: list[dict[str, Any]] = []

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        request = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        await self.socket.send(json.dumps(request))
        while True:
            frame: dict[str, Any] = json.loads(await self.socket.recv())
            if frame.get("id") == self.next_id:
                return frame
            if frame.get("method") == "SessionEvent":
                self.events.append(frame["params"])

    async def event(self, event_type: str) -> dict[str, Any]:
        while True:
            for seen in self.events:
                if seen["eventType"] == event_type:
                    return seen
            frame = json.loads(await self.socket.recv())
            if frame.get("method") == "SessionEvent":
                self.events.append(frame["params"])


async def _signed_in(local: LocalConsole, client: httpx.AsyncClient) -> str:
    answer = await client.post("/signin", json={"token": local.token})
    assert answer.status_code == 200, answer.text
    sign_in: str = answer.json()["signInToken"]
    return sign_in


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                found += [int(child), *_descendants(int(child))]
    return found


def _holding(pids: list[int], secret: str) -> list[str]:
    """The command lines of the processes among `pids` whose environment holds `secret`."""
    holding = []
    for pid in pids:
        with contextlib.suppress(OSError):  # a process that ended meanwhile holds nothing
            if secret.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                holding.append(Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " "))
    return holding


async def test_the_provider_key_is_in_the_gateways_settings_alone(local: LocalConsole) -> None:
    """`parley up` runs the LLM gateway with the shell's provider key in its owner-readable
    settings file, and no process it starts (agent hosts included) has the key. First in the
    module: a later test stops `parley up`, and this one reads its running processes."""
    settings = local.home / ".parley" / "llm.toml"
    assert settings.stat().st_mode & 0o777 == 0o600
    assert PROVIDER_KEY in settings.read_text()
    children = _descendants(local.up.pid)
    assert len(children) >= len(ACTORS)
    assert _holding(children, PROVIDER_KEY) == []


async def test_trace_and_audit_records_read_the_audit_under_parley_up(local: LocalConsole) -> None:
    """And the start form's agents are the local system's own, read from its registry."""
    async with httpx.AsyncClient(base_url=local.url) as client:
        sign_in = await _signed_in(local, client)
    origin = Origin(local.url.rstrip("/"))
    async with ws_connect(local.url.replace("http", "ws") + "ws", origin=origin) as raw:
        socket = _Socket(raw)
        await raw.send(
            json.dumps(
                {"jsonrpc": "2.0", "id": 1, "method": "SignIn", "params": {"token": sign_in}}
            )
        )
        assert json.loads(await raw.recv())["result"] == {"person": "alice"}
        listed = await socket.call("ListAgents", {})
        agents = sorted(LOCAL_SYSTEM.agents)  # every shipped agent registered at start
        assert listed.get("result") == {"agents": agents}, listed
        created = await socket.call("CreateSession", {"agents": ["gpt", "claude"]})
        session_id = created["result"]["sessionId"]
        started = await socket.call("StartTask", {"sessionId": session_id, "prompt": GOAL})
        assert started["result"]["state"] == "submitted", started
        async with asyncio.timeout(60):
            await socket.event("session_completed")
        # The auditor appends what the gate decided shortly after; every read must answer.
        async with asyncio.timeout(30):
            tree: list[dict[str, Any]] = []
            while not tree:
                traced = await socket.call("GetTrace", {"sessionId": session_id})
                assert "result" in traced, traced
                tree = traced["result"]["tree"]
        [root] = tree
        assert (root["requester"], root["target"]) == ("person-alice", "router"), root
        mine = await socket.call("ListAuditRecords", {})
        assert "result" in mine, mine
        assert mine["result"]["profile"] == "person-alice"
        assert root["envelopeId"] in {r["envelopeId"] for r in mine["result"]["records"]}
    refused = [line for line in local.up.lines if "Violation" in line or "violation" in line]
    assert not refused, refused


async def test_a_token_issued_while_up_runs_says_what_the_person_still_needs(
    local: LocalConsole,
) -> None:
    """Said when the token is issued, not at the first sign-in (`no credentials for carol`)."""
    env = _env()
    code, said = await finished(
        parley_cli(env, "console", "token", "--person", "carol", cwd=local.home)
    )
    assert code == 0, said
    needs = "`parley up` runs here without credentials for person-carol: restart it"
    assert any(line.startswith(needs) for line in said), said
    assert any("needs a profile `person-carol`" in line for line in said), said
    # bob: a person the system's bundle names has credentials from the start (not alice,
    # whose token a later test signs in with: issuing again revokes it).
    code, said = await finished(
        parley_cli(env, "console", "token", "--person", "bob", cwd=local.home)
    )
    assert code == 0 and not any("without credentials" in line for line in said), said
    # An A2A client is a person too (`person-<client>`): the same, said at its token.
    code, said = await finished(parley_cli(env, "a2a", "token", "--client", "dave", cwd=local.home))
    needs = "`parley up` runs here without credentials for person-dave: restart it"
    assert code == 0 and any(line.startswith(needs) for line in said), said


async def test_a_browser_connection_leaves_no_traceback_or_warning(local: LocalConsole) -> None:
    """The page, a sign-in and a WebSocket, as a browser opens them; then `parley up` stops,
    so everything the console wrote has been read."""
    async with httpx.AsyncClient(base_url=local.url) as client:
        page = await client.get("/")
        assert page.status_code == 200
        sign_in = await _signed_in(local, client)
    origin = Origin(local.url.rstrip("/"))
    async with ws_connect(local.url.replace("http", "ws") + "ws", origin=origin) as raw:
        await raw.send(
            json.dumps(
                {"jsonrpc": "2.0", "id": 0, "method": "SignIn", "params": {"token": sign_in}}
            )
        )
        assert json.loads(await raw.recv())["result"] == {"person": "alice"}
    local.up.signal(signal.SIGINT)
    assert await local.up.wait_exit(timeout=60) == 0
    console = [line for line in local.up.lines if line.startswith("[console]")]
    assert console, local.up.lines[-20:]
    broken = [line for line in console if "Logging error" in line or "Traceback" in line]
    assert not broken, "\n".join(console)
    warned = [line for line in console if "DeprecationWarning" in line]
    assert not warned, warned
