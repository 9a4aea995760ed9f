"""Seed 001's fairy tale with agent hosts that hold no provider key, under least privilege.

gpt and claude run `backend = "gateway"` brains (OpenAI's and Anthropic's wire formats): each
turn's model call is an `llm_request` through the gate to the LLM gateway, the only process
with the keys, which calls the local wire-format servers. Every process is its own nkey user
with the settings `parley nats-config` wrote for it, the gateway included; no process may hit
a permission violation, and only the gateway's requests carry a key.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from nats.aio.msg import Msg

from schemas import Decision, decode_envelope
from tests.support.llm_server import WireServer, anthropic_message, openai_completion
from tests.support.lockdown import LockedDown
from tests.support.processes import (
    READY,
    REPO,
    ProcessOutput,
    parley_env,
    start_actor,
    stopped,
)
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
    """The demo bundle (which lets gpt and claude call the gateway), with the test's models
    allowed too."""
    text = (REPO / "deploy/policy/demo.toml").read_text()
    text, count = re.subn(
        r"^allowed_models = \[", 'allowed_models = ["gpt-test", "claude-test", ', text, flags=re.M
    )
    assert count == 1, "the demo bundle's deployment-wide model allowlist moved"
    for agent in ("gpt", "claude"):
        assert re.search(rf'\[profiles\.{agent}\]\nallowed_targets = \[[^]]*"llm"', text), agent
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


@dataclass
class GatewaySystem:
    """Gate, router, LLM gateway and the two gateway-brained agents, each its own user, and
    the local wire-format servers the gateway calls."""

    locked: LockedDown
    env: dict[str, str]
    openai: WireServer
    anthropic: WireServer
    profiles: dict[str, Path]
    processes: dict[str, ProcessOutput]

    def config(self, actor: str) -> tuple[str, str]:
        return "--config", str(self.locked.settings_file(actor))

    def cli(self, *argv: str) -> ProcessOutput:
        return ProcessOutput([sys.executable, "-m", "tools", *argv, *self.config("cli")], self.env)


@asynccontextmanager
async def _gateway_system(locked: LockedDown, tmp_path: Path) -> AsyncIterator[GatewaySystem]:
    ns = locked.ns
    await locked.provision()
    signed, public = sign_policy(_policy(tmp_path), tmp_path / "keys")
    admin = await locked.connect("provisioner")
    await (await admin.jetstream().key_value(ns.bucket("policy"))).put("bundle", signed)
    await admin.close()
    openai, anthropic = WireServer(checks="openai"), WireServer(checks="anthropic")
    await openai.start()
    await anthropic.start()
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
    system = GatewaySystem(locked, env, openai, anthropic, profiles, {})
    config = system.config
    system.processes = {
        "gate": start_actor("gate", "gate", gate_env, *config("gate")),
        "router": start_actor("router", "router", env, *config("router")),
        "llm": start_actor("llm", "llm", llm_env, *config("llm")),
        "gpt": start_actor("agent", "gpt", env, "--profile", str(profiles["gpt"]), *config("gpt")),
        "claude": start_actor(
            "agent", "claude", env, "--profile", str(profiles["claude"]), *config("claude")
        ),
    }
    try:
        for process in system.processes.values():
            await process.wait_line(READY)
        yield system
    finally:
        for process in system.processes.values():
            process.close()
        await openai.close()
        await anthropic.close()


async def test_the_fairy_tale_runs_through_the_gateway_with_no_key_in_any_agent(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    locked = locked_down
    async with _gateway_system(locked, tmp_path) as system:
        openai, anthropic = system.openai, system.anthropic
        anthropic.queue(
            anthropic_message(_reply("Claude drafts: a fox named Ember.", "gpt")),
            anthropic_message(_reply("Claude: the village glows.", "gpt")),
        )
        openai.queue(
            openai_completion(_reply("GPT edits: Ember, a fox of embers.", "claude")),
            openai_completion(_reply("GPT: done.", final=True)),
        )
        cli = system.cli("collab", "--first", "claude", "--max-rounds", "4", DEMO_GOAL)
        try:
            code = await cli.wait_exit(60)
        finally:
            cli.close()
        assert code == 0, "\n".join(cli.lines)
        assert cli.lines[-1] == "stopped: final (round 4)"
        for process in system.processes.values():
            process.signal(signal.SIGTERM)
            assert await process.wait_exit() == 0
        for process in system.processes.values():
            refused = [line for line in process.lines if "permission" in line.lower()]
            assert not refused, f"{process.name}: {refused}"
    assert not openai.refused and not anthropic.refused, (openai.refused, anthropic.refused)
    assert len(openai.requests) == 2 and len(anthropic.requests) == 2
    assert {r.headers["authorization"] for r in openai.requests} == {f"Bearer {OPENAI_KEY}"}
    assert {r.headers["x-api-key"] for r in anthropic.requests} == {ANTHROPIC_KEY}
    for name, path in system.profiles.items():
        assert "key" not in path.read_text(), name
        assert "key" not in locked.settings_file(name).read_text().replace("nkey", ""), name


async def test_no_provider_is_called_for_a_session_its_person_stopped(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    """An agent's brain goes on asking its model after its person stopped the session (a
    newcomer's walk saw a cancelled task's steps run for minutes): the gateway reads how the
    session stands before it calls a provider (bus/_session_ends.py). Here the gateway is held
    (SIGSTOP) with gpt's model call waiting for it, the person stops the session, and the
    gateway, let go, answers the call refused without calling OpenAI."""
    locked, ns = locked_down, locked_down.ns
    async with _gateway_system(locked, tmp_path) as system:
        gateway = system.processes["llm"]
        gateway.signal(signal.SIGSTOP)
        await stopped(gateway.pid)
        # The gate's decision on gpt's model call, as the operator follows it live: once it
        # is told, the call is delivered to the held gateway (the same stores' round).
        operator = await locked.connect("operator")
        admitted: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def on_decision(msg: Msg) -> None:
            decision = decode_envelope(msg.data)
            if (
                isinstance(decision, Decision)
                and decision.envelope_kind == "llm_request"
                and decision.allowed
                and not admitted.done()
            ):
                admitted.set_result(None)

        await operator.subscribe(ns.decisions("gpt"), cb=on_decision)
        await operator.flush()
        say = system.cli("say", "@gpt", "Write one line about foxes.")
        try:
            _, opened = await say.wait_line(r"^session \S+:", timeout=30)
            session = opened.split()[1].rstrip(":")
            await asyncio.wait_for(admitted, 30)
            stop = system.cli("collab", "--stop", session)
            assert await stop.wait_exit(30) in (0, 130), stop.lines
            stop.close()
            assert await say.wait_exit(30) == 130, say.lines
            gateway.signal(signal.SIGCONT)
            # Its own word that it answered the call, refused, having called nobody first.
            await gateway.wait_line(
                r'"msg":"llm_request_completed".*"status":"denied","code":"SESSION_EXPIRED"',
                timeout=30,
            )
        finally:
            say.close()
            await operator.close()
        assert system.openai.requests == [], "a provider was called for an ended session"
