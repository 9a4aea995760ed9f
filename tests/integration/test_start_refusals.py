"""An actor whose credentials lack a grant its start needs says so at once, and exits as
misconfigured: a refused request goes unanswered, like one made while a cluster elects a
leader, and was waited out for 45 s ("electing a leader?") before it failed with a bare
timeout. Under least privilege (real server, real nkey users, a real actor process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bus import ConfigError, ConnectionRefusals, asked_at_start, connect, jetstream
from tests.support.lockdown import LockedDown
from tests.support.processes import parley_env, start_actor
from tools.cli import main as cli_main
from tools.provision import provision_once


async def test_a_look_up_the_server_refused_is_said_at_once(locked_down: LockedDown) -> None:
    """An agent may not read the gate's traces bucket: the refusal ends the wait."""
    locked, ns = locked_down, locked_down.ns
    refusals = ConnectionRefusals()
    settings = locked.settings("gpt")
    nc = await connect(settings, "gpt", reconnect_forever=False, on_refused=refusals.note)
    try:
        js = jetstream(nc, settings)
        with pytest.raises(ConfigError) as refused:
            await asked_at_start(
                refusals, lambda: js.key_value(ns.bucket("traces")), "the traces bucket"
            )
    finally:
        await nc.close()
    message = str(refused.value)
    assert message.startswith("the traces bucket: the server refused")
    assert "permissions violation" in message.lower()
    assert "parley nats-config" in message


async def test_an_actor_started_without_its_grants_refuses_to_start(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    """A gate run with an agent's credentials (as one started under grants an earlier
    release wrote) may not read the policy bucket: it says which look-up was refused and
    the command that grants it, and exits as misconfigured (2)."""
    locked, ns = locked_down, locked_down.ns
    config = locked.settings_file("gpt")
    await provision_once(locked.settings_file("provisioner"), locked.server.url, [config])
    assert cli_main(["policy", "keygen", "--out", str(tmp_path / "keys")]) == 0
    options = {"policy_keys": [str(tmp_path / "keys" / "policy.pub")]}
    env = {**parley_env(locked.server.url, ns.root), "PARLEY_OPTIONS": json.dumps(options)}
    gate = start_actor("gate", "gpt", env, "--config", str(config))
    try:
        await gate.wait_line(r"refusing to start.*the policy bucket: the server refused")
        assert "parley nats-config" in gate.lines[-2] + gate.lines[-1]
        assert await gate.wait_exit() == 2
    finally:
        gate.close()
