"""The whole path as real processes for one test: gate, router and agent hosts.

The demo policy bundle is signed with a key made for the test and published in the test's
namespace; the gate trusts that key. Agents run `parley run agent --profile P` for each
profile given (a name in deploy/agents, or a path to a test profile).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from nats.aio.client import Client as NATS

from bus import EmbeddedServer
from schemas import Namespace
from tests.support.processes import READY, REPO, ProcessOutput, parley_env, start_actor
from tools.demo import publish_policy

__all__ = ("DEMO_AGENTS", "parley_cli", "running_system")

DEMO_AGENTS: Mapping[str, str] = {"gpt": "gpt", "claude": "claude"}


@asynccontextmanager
async def running_system(
    nc: NATS,
    server: EmbeddedServer,
    ns: Namespace,
    keys: Path,
    agents: Mapping[str, str] = DEMO_AGENTS,
    *,
    extra_env: Mapping[str, str] | None = None,
    **settings: str,
) -> AsyncIterator[dict[str, str]]:
    """Start gate, router and agents; yield the environment a `parley` command needs.

    `extra_env` goes to every process (an API key variable a test profile names); `settings`
    become `PARLEY_*` variables.
    """
    public = await publish_policy(nc.jetstream(), ns, REPO / "deploy/policy/demo.toml", keys)
    env = {**parley_env(server.url, ns.root, **settings), **(extra_env or {})}
    gate_env = {
        **env,
        "PARLEY_OPTIONS": json.dumps({"policy_keys": [str(public)], "tenant": "demo"}),
    }
    processes: list[ProcessOutput] = []
    async with AsyncExitStack() as stack:
        stack.callback(_close_all, processes)
        processes.append(start_actor("gate", "gate", gate_env))
        processes.append(start_actor("router", "router", env))
        for actor_id, profile in agents.items():
            processes.append(start_actor("agent", actor_id, env, "--profile", profile))
        for process in processes:
            await process.wait_line(READY)
        yield env


def _close_all(processes: list[ProcessOutput]) -> None:
    for process in processes:
        process.close()


def parley_cli(env: Mapping[str, str], *argv: str) -> ProcessOutput:
    """A `parley` command as a real process (`collab`, `say`, `demo`, …)."""
    return ProcessOutput([sys.executable, "-m", "tools", *argv], env, name=argv[0])
