"""The whole path as real processes for one test: gate, router and agent hosts.

The demo policy bundle is signed with a key made for the test and published in the test's
namespace; the gate trusts that key. Agents run `parley run agent --profile P` for each
profile given (a name in deploy/agents, or a path to a test profile).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from nats.aio.client import Client as NATS

from bus import EmbeddedServer
from schemas import Namespace
from tests.support.lockdown import LockedDown
from tests.support.processes import READY, REPO, ProcessOutput, parley_env, start_actor
from tools.demo import publish_policy, sign_policy

__all__ = (
    "DEMO_AGENTS",
    "System",
    "finished",
    "parley_cli",
    "running_locked_system",
    "running_system",
)

DEMO_AGENTS: Mapping[str, str] = {"gpt": "gpt", "claude": "claude"}


@dataclass
class System:
    """The running processes by actor id, and the environment a `parley` command needs."""

    env: dict[str, str]
    processes: dict[str, ProcessOutput] = field(default_factory=dict)
    _argv: dict[str, tuple[str, dict[str, str], tuple[str, ...]]] = field(default_factory=dict)

    async def start(self, actor_id: str, run: str, env: dict[str, str], *extra: str) -> None:
        self._argv[actor_id] = (run, env, extra)
        self.processes[actor_id] = start_actor(run, actor_id, env, *extra)
        await self.processes[actor_id].wait_line(READY)

    async def kill_and_restart(self, actor_id: str) -> None:
        """SIGKILL one actor and start it again, as a supervisor would."""
        self.processes[actor_id].kill()
        self.processes[actor_id].close()
        run, env, extra = self._argv[actor_id]
        await self.start(actor_id, run, env, *extra)

    def close(self) -> None:
        for process in self.processes.values():
            process.close()


@asynccontextmanager
async def running_system(
    nc: NATS,
    server: EmbeddedServer,
    ns: Namespace,
    keys: Path,
    agents: Mapping[str, str] = DEMO_AGENTS,
    *,
    policy: Path = REPO / "deploy/policy/demo.toml",
    extra_env: Mapping[str, str] | None = None,
    router_options: Mapping[str, object] | None = None,
    **settings: str,
) -> AsyncIterator[System]:
    """Start gate, router and agents, and stop them all on the way out.

    `policy` is the bundle source the gate enforces (signed here with a fresh key);
    `extra_env` goes to every process (an API key variable a test profile names);
    `router_options` are the router's `[options]`; `settings` become `PARLEY_*` variables.
    """
    public = await publish_policy(nc.jetstream(), ns, policy, keys)
    env = {**parley_env(server.url, ns.root, **settings), **(extra_env or {})}
    gate_env = {
        **env,
        "PARLEY_OPTIONS": json.dumps({"policy_keys": [str(public)], "tenant": "demo"}),
    }
    system = System(env)
    try:
        await system.start("gate", "gate", gate_env)
        router_env = {**env, "PARLEY_OPTIONS": json.dumps(dict(router_options or {}))}
        await system.start("router", "router", router_env)
        for actor_id, profile in agents.items():
            await system.start(actor_id, "agent", env, "--profile", profile)
        yield system
    finally:
        system.close()


@asynccontextmanager
async def running_locked_system(
    locked: LockedDown,
    keys: Path,
    agents: Mapping[str, str] = DEMO_AGENTS,
    *,
    router_options: Mapping[str, object] | None = None,
    gate_options: Mapping[str, object] | None = None,
    policy: Path = REPO / "deploy/policy/demo.toml",
    **settings: str,
) -> AsyncIterator[System]:
    """`running_system` under the least-privilege config: the provisioner creates the streams
    and the receivers' durables and publishes the bundle (`policy`, the demo's by default);
    every process runs as its own nkey user with the settings file `parley nats-config` wrote
    for it (`--config`)."""
    ns = locked.ns
    await locked.provision()
    signed, public = sign_policy(policy, keys)
    admin = await locked.connect("provisioner")  # publishing bundles is an operator's act
    try:
        await (await admin.jetstream().key_value(ns.bucket("policy"))).put("bundle", signed)
    finally:
        await admin.close()
    env = parley_env(locked.server.url, ns.root, **settings)
    system = System(env)

    def config(actor: str) -> tuple[str, str]:
        return "--config", str(locked.settings_file(actor))

    gate_env = {
        **env,
        "PARLEY_OPTIONS": json.dumps(
            {"policy_keys": [str(public)], "tenant": "demo", **(gate_options or {})}
        ),
    }
    router_env = {**env, "PARLEY_OPTIONS": json.dumps(dict(router_options or {}))}
    try:
        await system.start("gate", "gate", gate_env, *config("gate"))
        await system.start("router", "router", router_env, *config("router"))
        for actor_id, profile in agents.items():
            await system.start(actor_id, "agent", env, "--profile", profile, *config(actor_id))
        yield system
    finally:
        system.close()


def parley_cli(env: Mapping[str, str], *argv: str, cwd: Path = REPO) -> ProcessOutput:
    """A `parley` command as a real process (`collab`, `say`, `demo`, …), run in `cwd`."""
    return ProcessOutput([sys.executable, "-m", "tools", *argv], env, name=argv[0], cwd=cwd)


async def finished(cli: ProcessOutput, timeout: float = 60) -> tuple[int, list[str]]:
    """Wait for a `parley` command to exit (and close it): its exit code and output lines."""
    try:
        code = await cli.wait_exit(timeout)
    finally:
        cli.close()
    return code, cli.lines
