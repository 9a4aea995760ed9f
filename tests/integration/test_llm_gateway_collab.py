"""Seed 001's fairy tale with agent hosts that hold no provider key, under least privilege.

gpt and claude run `backend = "gateway"` brains (OpenAI's and Anthropic's wire formats): each
turn's model call is an `llm_request` through the gate to the LLM gateway, the only process
with the keys, which calls the local wire-format servers. Every process is its own nkey user
with the settings `parley nats-config` wrote for it, the gateway included; no process may hit
a permission violation, and only the gateway's requests carry a key.
"""

from __future__ import annotations

import json
import re
import signal
import sys
from pathlib import Path

from tests.support.llm_server import WireServer, anthropic_message, openai_completion
from tests.support.lockdown import LockedDown
from tests.support.processes import READY, REPO, ProcessOutput, parley_env, start_actor
from tools.demo import DEMO_GOAL, sign_policy

OPENAI_KEY = "sk-gateway-openai-0001"
ANTHROPIC_KEY = "gateway-anthropic-0002"


def _reply(message: str, handoff: str = "", final: bool = False) -> str:
    reply: dict[str, object] = {"message": message}
    if handoff:
        reply["handoff"] = {"to": handoff, "task": f"Your turn, {handoff}."}
    if final:
        reply["final"] = True
    return json.dumps(reply)


def _policy(tmp_path: Path) -> Path:
    """The demo bundle, with the agents' models allowed and the gateway as their target."""
    text = (REPO / "deploy/policy/demo.toml").read_text()
    text, count = re.subn(
        r"allowed_models = \[", 'allowed_models = ["gpt-test", "claude-test", ', text
    )
    assert count == 1
    for agent in ("gpt", "claude"):  # the demo bundle grants their model calls
        assert f'[profiles.{agent}]\nallowed_targets = ["router", "llm"]' in text, agent
    assert "\n[profiles.llm]\n" in text
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


def _profiles(directory: Path) -> dict[str, Path]:
    directory.mkdir()
    profiles = {}
    for name, model, api, peer in (
        ("gpt", "gpt-test", "openai", "claude"),
        ("claude", "claude-test", "anthropic", "gpt"),
    ):
        path = directory / f"{name}.toml"
        path.write_text(
            f'name = "{name}"\nmodel = "{model}"\npeers = ["{peer}"]\n'
            f'[brain]\nbackend = "gateway"\napi = "{api}"\n'
        )
        profiles[name] = path
    return profiles


async def test_the_fairy_tale_runs_through_the_gateway_with_no_key_in_any_agent(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    signed, public = sign_policy(_policy(tmp_path), tmp_path / "keys")
    admin = await locked.connect("provisioner")
    await (await admin.jetstream().key_value(ns.bucket("policy"))).put("bundle", signed)
    await admin.close()
    openai, anthropic = WireServer(checks="openai"), WireServer(checks="anthropic")
    await openai.start()
    await anthropic.start()
    anthropic.queue(
        anthropic_message(_reply("Claude drafts: a fox named Ember.", "gpt")),
        anthropic_message(_reply("Claude: the village glows.", "gpt")),
    )
    openai.queue(
        openai_completion(_reply("GPT edits: Ember, a fox of embers.", "claude")),
        openai_completion(_reply("GPT: done.", final=True)),
    )
    env = parley_env(locked.server.url, ns.root)
    gate_env = {
        **env,
        "PARLEY_OPTIONS": json.dumps({"policy_keys": [str(public)], "tenant": "demo"}),
    }
    gateway_options = {
        "policy_keys": [str(public)],
        "tenant": "demo",
        "providers": {
            "openai-local": {
                "api": "openai",
                "base_url": f"{openai.url}/v1",
                "api_key": OPENAI_KEY,
            },
            "anthropic-local": {
                "api": "anthropic",
                "base_url": anthropic.url,
                "api_key": ANTHROPIC_KEY,
            },
        },
        "models": {"gpt-test": "openai-local", "claude-test": "anthropic-local"},
    }
    llm_env = {**env, "PARLEY_OPTIONS": json.dumps(gateway_options)}
    profiles = _profiles(tmp_path / "agents")

    def config(actor: str) -> tuple[str, str]:
        return "--config", str(locked.settings_file(actor))

    processes = [
        start_actor("gate", "gate", gate_env, *config("gate")),
        start_actor("router", "router", env, *config("router")),
        start_actor("llm", "llm", llm_env, *config("llm")),
        start_actor("agent", "gpt", env, "--profile", str(profiles["gpt"]), *config("gpt")),
        start_actor(
            "agent", "claude", env, "--profile", str(profiles["claude"]), *config("claude")
        ),
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
        await openai.close()
        await anthropic.close()
    assert not openai.refused and not anthropic.refused, (openai.refused, anthropic.refused)
    assert len(openai.requests) == 2 and len(anthropic.requests) == 2
    assert {r.headers["authorization"] for r in openai.requests} == {f"Bearer {OPENAI_KEY}"}
    assert {r.headers["x-api-key"] for r in anthropic.requests} == {ANTHROPIC_KEY}
    for name, path in profiles.items():
        assert "key" not in path.read_text(), name
        assert "key" not in locked.settings_file(name).read_text().replace("nkey", ""), name
