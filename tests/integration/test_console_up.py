"""The console under `parley up`, as a person runs it: `parley console token`, then
`parley up deploy/topologies/console.toml` locked down (the default) in a directory of its own.

`parley up` must give the person with a token broker credentials of their own
(`person-alice`), provision them, and start the console with its own nkey user; a session the
person starts through the console's JSON-RPC goes through the real gate as `person-alice` and
reaches its end. The token store keeps only the token's hash, owner-only.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect as ws_connect

from tests.support.processes import READY, REPO, SUPPORT_PATH, close_up, parley_up
from tools.demo import sign_policy

pytestmark = pytest.mark.timeout(180)

STARTUP_S = 60.0


def _parley(env: dict[str, str], cwd: Path, *argv: str) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "tools", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=STARTUP_S,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def _call(method: str, params: dict[str, Any], request_id: int) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


async def test_a_person_runs_a_session_through_the_console_under_parley_up(
    tmp_path: Path,
) -> None:
    home = tmp_path
    (home / "deploy").symlink_to(REPO / "deploy")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "PARLEY_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SUPPORT_PATH, env.get("PYTHONPATH")]))
    code, token, stderr = _parley(env, home, "console", "token", "--person", "alice")
    assert code == 0, stderr
    token = token.strip()
    store = home / ".parley" / "console" / "tokens.json"
    assert store.stat().st_mode & 0o077 == 0
    stored = store.read_text()
    assert token not in stored
    assert hashlib.sha256(token.encode()).hexdigest() in stored

    # The demo bundle has a profile for alice's principal, as it has for the terminal's.
    signed, _ = sign_policy(REPO / "deploy/policy/demo.toml", home / "keys")  # gate.toml's key
    (home / "signed.json").write_bytes(signed)
    topology = home / "console.toml"
    topology.write_text(
        (REPO / "deploy/topologies/console.toml")
        .read_text()
        .replace('"gate.toml"', '"deploy/topologies/gate.toml"')
        + "env = { PARLEY_OPTIONS = '{\"port\": 0}' }\n"
    )
    up = parley_up(topology, env, cwd=home)
    try:
        up.wait_line_sync(r"^\[nats\] embedded nats-server .*locked down", timeout=STARTUP_S)
        for actor in ("gate", "router", "gpt", "claude", "console"):
            up.wait_line_sync(rf"^\[{actor}\] .*{READY}", timeout=STARTUP_S)
        _, line = up.wait_line_sync(r'^\[console\] .*"msg":"console listening"', timeout=STARTUP_S)
        url = json.loads(line.split("] ", 1)[1])["url"]
        assert (home / ".parley/broker/actors/person-alice.toml").is_file()
        code, _, stderr = _parley(env, home, "policy", "publish", str(home / "signed.json"))
        assert code == 0, stderr
        up.wait_line_sync(r"^\[gate\] .*policy bundle in force", timeout=STARTUP_S)

        async with httpx.AsyncClient(base_url=url) as client:
            signed_in = await client.post("/signin", json={"token": token})
            assert signed_in.status_code == 200, signed_in.text
            sign_in = signed_in.json()["signInToken"]
        async with ws_connect(url.replace("http", "ws") + "ws") as socket:
            await socket.send(_call("SignIn", {"token": sign_in}, 0))
            assert json.loads(await socket.recv())["result"] == {"person": "alice"}
            await socket.send(_call("CreateSession", {"agents": ["gpt", "claude"]}, 1))
            created = json.loads(await socket.recv())["result"]
            session_id = created["sessionId"]
            # The shipped topology gives the console the signers' keys: the bundle published
            # after it started is the one it checked (seed 002 §6).
            assert created["handshake"]["policyBundle"]["label"] == "demo-1"
            goal = "Summarize this in 1 sentence, then stop."
            await socket.send(_call("StartTask", {"sessionId": session_id, "prompt": goal}, 2))
            assert json.loads(await socket.recv())["result"]["state"] == "submitted"
            while True:
                frame = json.loads(await socket.recv())
                assert frame.get("method") == "SessionEvent", frame
                if frame["params"]["eventType"] == "session_completed":
                    break
            assert frame["params"]["payload"]["stopReason"] == "final"
        assert not [line for line in up.lines if "permission violation" in line]
        up.signal(signal.SIGINT)
        up.process.wait(30)
    finally:
        close_up(up)
