"""A deployment for task sessions (seed 002 §7): every process real and its own nkey user.

A locked-down server; the gate, the router, the tool runtime, the agent `gpt` (scripted: it
writes `<goal>.txt` with File.Write, which needs its owner's approval, then answers) and the
console, told the runtime's workspaces for GetPatchPreview. Three people: alice and bob with
console tokens, and `cli` at a terminal.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from actors.console import TokenStore
from bus import EmbeddedServer
from schemas import Namespace
from tests.support.lockdown import LOCKED_ACTORS, LockedDown
from tests.support.processes import parley_env
from tests.support.system import System
from tools.demo import sign_bundle
from tools.natsconf import write_nats_config

__all__ = ("LATE_GOAL", "PEOPLE", "TaskDeployment", "task_deployment")

PEOPLE = ("alice", "bob")
_PERSON = {"allowed_targets": ["router", "tools"], "start_traces": True, "speaks_for_person": True}
BUNDLE = {
    "schema_version": "1.0",
    "version": 1,
    "tenant_id": "demo",
    "expires_at": "2099-01-01T00:00:00Z",
    "approval_rules": [{"approval_rule_id": "writes", "title": "Writes", "timeout_s": 120}],
    "profiles": {
        "router": {"allowed_targets": ["gpt"], "start_traces": True},
        "cli": _PERSON,
        "person-alice": _PERSON,
        "person-bob": _PERSON,
        "tools": {},
        "gpt": {
            "allowed_targets": ["router", "tools"],
            "capabilities": ["File.Write"],
            "scopes": [
                {
                    "name": "File.Write",
                    "allowed_paths": ["."],
                    "requires_approval": True,
                    "approval_rule_id": "writes",
                }
            ],
        },
    },
}
LATE_GOAL = "late"
"""A goal whose File.Write the agent host waits for only 6 s (its `deadline_ms`)."""
SCRIPT = """
[[turn]]
goal = "late"
step = 0
[[turn.calls]]
tool = "use_tool"
to = "File.Write"
arguments = { path = "{goal}.txt", content = "written for {goal}\\n" }
deadline_ms = 6000

[[turn]]
step = 0
[[turn.calls]]
tool = "use_tool"
to = "File.Write"
arguments = { path = "{goal}.txt", content = "written for {goal}\\n" }
deadline_ms = 110000

[[turn]]
step = 1
message = "done: {results}"
final = true
"""


@dataclass(frozen=True)
class TaskDeployment:
    url: str
    tokens: dict[str, str]
    system: System
    locked: LockedDown
    workspaces: Path

    def config(self, actor: str) -> tuple[str, str]:
        return "--config", str(self.locked.settings_file(actor))


@asynccontextmanager
async def task_deployment(
    root: Path, ns: Namespace, *, turn_timeout_s: float = 150
) -> AsyncIterator[TaskDeployment]:
    """Everything started under `root`; stopped on the way out. `turn_timeout_s`: the
    router's (a task's approval moves a call's deadline past it)."""
    config_dir = root / "nats-config"
    people = [f"person-{name}" for name in PEOPLE]
    write_nats_config(config_dir, [*LOCKED_ACTORS, "console", *people], ns)
    server = EmbeddedServer(root / "nats", authorization=config_dir / "authorization.conf")
    server.start()
    locked = LockedDown(server, config_dir, ns)
    system = System(parley_env(server.url, ns.root))
    try:
        await locked.provision()
        signed, public = sign_bundle(json.dumps(BUNDLE).encode(), root / "keys")
        admin = await locked.connect("provisioner")
        await (await admin.jetstream().key_value(ns.bucket("policy"))).put("bundle", signed)
        await admin.close()
        agents = root / "agents"
        (agents / "scripts").mkdir(parents=True)
        (agents / "scripts" / "gpt.toml").write_text(SCRIPT)
        (agents / "gpt.toml").write_text(
            'name = "gpt"\nmodel = "scripted"\ntools = ["File.Write"]\n'
            '[brain]\nbackend = "scripted"\nscript = "scripts/gpt.toml"\n'
        )
        workspaces = root / "workspaces"
        keys = {"policy_keys": [str(public)], "tenant": "demo"}

        def options(**values: object) -> dict[str, str]:
            return {**system.env, "PARLEY_OPTIONS": json.dumps(values)}

        def config(actor: str) -> tuple[str, str]:
            return "--config", str(locked.settings_file(actor))

        await system.start("gate", "gate", options(**keys), *config("gate"))
        router = options(turn_timeout_s=turn_timeout_s)
        await system.start("router", "router", router, *config("router"))
        tools = options(**keys, workspaces=str(workspaces))
        await system.start("tools", "tools", tools, *config("tools"))
        gpt = options(agents_dir=str(agents))
        await system.start("gpt", "agent", gpt, "--profile", "gpt", *config("gpt"))
        store = TokenStore(root / "console" / "tokens.json")
        tokens = {name: store.issue(name) for name in PEOPLE}
        console = options(
            port=0,
            tokens_file=str(store.path),
            people_dir=str(config_dir / "actors"),
            workspaces=str(workspaces),
        )
        await system.start("console", "console", console, *config("console"))
        _, line = await system.processes["console"].wait_line(r'"msg":"console listening"')
        url = json.loads(line)["url"]
        yield TaskDeployment(url, tokens, system, locked, workspaces)
    finally:
        system.close()
        server.close()
