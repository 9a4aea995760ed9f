"""A whole deployment for the A2A edge's tests: a locked-down server, the gate, the router,
the scripted gpt and claude, the auditor and `parley run a2a`, all real processes.

Three A2A clients have bearer tokens and broker credentials of their own: alice and bob
(`person-alice`, `person-bob`, whose profiles the demo bundle has) and carol, whom the bundle
names nowhere, so the gate refuses whatever she sends. The bundle exposes gpt
(`a2a_exposed = true`) and not claude. gpt's script adds two goals to the demo's: `summarise`
(one final answer) and `slow` (an answer that takes long, so a cancel lands mid-task).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from actors.console import TokenStore
from bus import EmbeddedServer
from schemas import Namespace
from tests.support.audit import AuditorKeys
from tests.support.lockdown import LOCKED_ACTORS, LockedDown
from tests.support.processes import REPO, parley_env
from tests.support.system import System, running_locked_system
from tools.natsconf import write_nats_config

__all__ = ("CLIENTS", "A2aDeployment", "a2a_deployment")

CLIENTS = ("alice", "bob", "carol")
_EXTRA_TURNS = """
[[turn]]
goal = "summarise"
message = "{name} summarised: {goal}"
final = true

[[turn]]
goal = "slow"
delay_s = 60.0
message = "{name} took its time."
final = true
"""


@dataclass(frozen=True)
class A2aDeployment:
    """The edge's URL, each client's token, and the processes behind them."""

    url: str
    tokens: dict[str, str]
    system: System
    ns: Namespace
    locked: LockedDown


def _gpt_profile(root: Path) -> str:
    root.mkdir(parents=True, exist_ok=True)
    demo_script = (REPO / "deploy/agents/scripts/gpt.toml").read_text()
    (root / "gpt-script.toml").write_text(_EXTRA_TURNS + demo_script)
    profile = (REPO / "deploy/agents/gpt.toml").read_text()
    profile = re.sub(r'script = ".*"', 'script = "gpt-script.toml"', profile)
    (root / "gpt.toml").write_text(profile)
    return str(root / "gpt.toml")


@asynccontextmanager
async def a2a_deployment(root: Path, ns: Namespace) -> AsyncIterator[A2aDeployment]:
    """Everything started under `root`; stopped on the way out."""
    people = [f"person-{name}" for name in CLIENTS]
    config_dir = root / "nats-config"
    write_nats_config(config_dir, [*LOCKED_ACTORS, "a2a", *people], ns)
    server = EmbeddedServer(root / "nats", authorization=config_dir / "authorization.conf")
    server.start()
    try:
        locked = LockedDown(server, config_dir, ns)
        policy = REPO / "deploy/policy/demo.toml"  # it exposes gpt, and not claude
        exposed = tomllib.loads(policy.read_text())["profiles"]
        assert exposed["gpt"].get("a2a_exposed") and not exposed["claude"].get("a2a_exposed")
        agents = {"gpt": _gpt_profile(root / "agents"), "claude": "claude"}
        async with running_locked_system(locked, root / "keys", agents, policy=policy) as system:
            auditor = {"signing_key": str(AuditorKeys(root).private_path), "tenant": "demo"}
            auditor_env = {
                **parley_env(server.url, ns.root, allow_lazy_fsync="true"),
                "PARLEY_OPTIONS": json.dumps(auditor),
            }
            auditor_config = ("--config", str(locked.settings_file("auditor")))
            await system.start("auditor", "auditor", auditor_env, *auditor_config)
            store = TokenStore(root / "a2a" / "tokens.json")
            tokens = {name: store.issue(name) for name in CLIENTS}
            options = {
                "port": 0,
                "policy_keys": [str(root / "keys" / "policy.pub")],
                "tenant": "demo",
                "tokens_file": str(store.path),
                "people_dir": str(config_dir / "actors"),
                "task_timeout_s": 90,
            }
            env = {**parley_env(server.url, ns.root), "PARLEY_OPTIONS": json.dumps(options)}
            config = ("--config", str(locked.settings_file("a2a")))
            await system.start("a2a", "a2a", env, *config)
            _, line = await system.processes["a2a"].wait_line(r'"msg":"a2a listening"')
            url = json.loads(line)["url"]
            yield A2aDeployment(url, tokens, system, ns, locked)
    finally:
        server.close()
