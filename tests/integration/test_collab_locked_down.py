"""Seed 001's fairy tale under least privilege: every process is its own nkey user.

The server runs `parley nats-config`'s generated authorization; the provisioner creates the
streams, buckets and the receivers' durables; the gate, the router and both agent hosts run
with the settings files the generator wrote for them, and so does `parley collab`. The tale
must end with `final` and no process may hit a permission violation: the router's grants
(sessions bucket, events, its own dead letters) and the CLI's (submit, ordered readers of the
events stream) are exactly what they need.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

from tests.support.lockdown import LockedDown
from tests.support.processes import READY, REPO, ProcessOutput, parley_env, start_actor
from tools.demo import DEMO_GOAL, sign_policy


async def test_the_fairy_tale_runs_with_every_process_as_its_own_user(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    signed, public = sign_policy(REPO / "deploy/policy/demo.toml", tmp_path / "keys")
    admin = await locked.connect("provisioner")  # publishing bundles is an operator's act
    await (await admin.jetstream().key_value(ns.bucket("policy"))).put("bundle", signed)
    await admin.close()
    env = parley_env(locked.server.url, ns.root)
    gate_env = {
        **env,
        "PARLEY_OPTIONS": json.dumps({"policy_keys": [str(public)], "tenant": "demo"}),
    }

    def config(actor: str) -> tuple[str, str]:
        return "--config", str(locked.settings_file(actor))

    processes = [
        start_actor("gate", "gate", gate_env, *config("gate")),
        start_actor("router", "router", env, *config("router")),
        start_actor("agent", "gpt", env, "--profile", "gpt", *config("gpt")),
        start_actor("agent", "claude", env, "--profile", "claude", *config("claude")),
    ]
    try:
        for process in processes:
            await process.wait_line(READY)
        argv = [sys.executable, "-m", "tools", "collab", *config("cli")]
        cli = ProcessOutput([*argv, "--first", "claude", "--max-rounds", "4", DEMO_GOAL], env)
        try:
            code = await cli.wait_exit(60)
        finally:
            cli.close()
        assert code == 0, "\n".join(cli.lines)
        assert cli.lines[-1] == "stopped: final (round 4)"
        for process in processes:
            process.signal(signal.SIGTERM)
            assert await process.wait_exit() == 0
        for process in processes:
            refused = [line for line in process.lines if "permission" in line.lower()]
            assert not refused, f"{process.name}: {refused}"
    finally:
        for process in processes:
            process.close()
