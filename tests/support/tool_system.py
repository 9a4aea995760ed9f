"""One locked-down system with the tool runtime, shared by the end-to-end tool tests.

Starting a whole system (a nats-server under `parley nats-config`'s least-privilege config,
the provisioner's streams, a signed bundle, the gate, the router, the tool runtime and a
scripted agent, each its own OS process and nkey user) costs several seconds of CPU; the
tests that drive it each differ only in which agent they ask and what its script does. So
the system is started once per test process (`tool_system`, session-scoped), each agent by
the first test that asks it (`ToolSystem.agent`), and the tests keep apart as the product
keeps people apart: each asks its own agent, and every `parley say` opens a session (and so
a workspace) of its own.

- `gpt` writes and reads a file within its scope and tries one outside it;
- `claude` calls an MCP server's tools, one granted, one not;
- `keeper` writes and deletes only with a person's approval (`writes`, `quick` rules);
- `sleeper` runs a command that waits until the test lets it go.

The teardown stops every process with SIGTERM and requires a clean exit, and no process may
ever have been refused by the broker (a missing grant in the least-privilege config).
"""

from __future__ import annotations

import json
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from bus import EmbeddedServer
from schemas import Namespace
from tests.support.lockdown import LOCKED_ACTORS, LockedDown
from tests.support.processes import READY, REPO, ProcessOutput, parley_env, start_actor
from tools.demo import sign_bundle
from tools.natsconf import write_nats_config

__all__ = ("SCRIPTS", "ToolSystem", "running_tool_system")

PERSON = {"allowed_targets": ["router", "tools"], "start_traces": True, "speaks_for_person": True}
BUNDLE = {
    "schema_version": "1.0",
    "version": 1,
    "tenant_id": "demo",
    "expires_at": "2099-01-01T00:00:00Z",
    "approval_rules": [
        {"approval_rule_id": "writes", "title": "Writes", "timeout_s": 120},
        {"approval_rule_id": "quick", "title": "Deletes", "timeout_s": 2},
    ],
    "profiles": {
        "router": {
            "allowed_targets": ["gpt", "claude", "keeper", "sleeper"],
            "start_traces": True,
        },
        "cli": PERSON,
        "person-bob": {**PERSON, "allowed_targets": ["router", "tools", "gpt"]},  # delegates
        "tools": {},  # the tool runtime only answers: a profile with every default
        "gpt": {
            "allowed_targets": ["router", "tools"],
            "capabilities": ["File.Read", "File.Write"],
            "scopes": [
                {"name": "File.Write", "allowed_paths": ["."], "max_file_size_bytes": 1000},
                {"name": "File.Read", "allowed_paths": ["."]},
            ],
        },
        "claude": {"allowed_targets": ["router", "tools"], "capabilities": ["Mcp.notes.add"]},
        "sleeper": {
            "allowed_targets": ["router", "tools"],
            "capabilities": ["Shell.Exec"],
            "scopes": [
                {"name": "Shell.Exec", "allowed_commands": ["python3"], "allowed_paths": ["."]}
            ],
        },
        "keeper": {
            "allowed_targets": ["router", "tools"],
            "capabilities": ["File.Write", "File.Delete"],
            "scopes": [
                {
                    "name": "File.Write",
                    "allowed_paths": ["."],
                    "requires_approval": True,
                    "approval_rule_id": "writes",
                },
                {
                    "name": "File.Delete",
                    "allowed_paths": ["."],
                    "requires_approval": True,
                    "approval_rule_id": "quick",
                },
            ],
        },
    },
}
# `gpt` writes a note, reads it back, then tries a path outside its scope.
FILES_SCRIPT = """
[[turn]]
step = 0
[[turn.calls]]
tool = "use_tool"
to = "File.Write"
arguments = { path = "notes/today.txt", content = "hi from {name}" }

[[turn]]
step = 1
calls = [
  { tool = "use_tool", to = "File.Read", arguments = { path = "notes/today.txt" } },
  { tool = "use_tool", to = "File.Read", arguments = { path = "/etc/hostname" } },
]

[[turn]]
step = 2
message = "read: {results}"
final = true
"""
# `claude` calls the MCP server's granted tool and the one whose description is hostile.
MCP_SCRIPT = """
[[turn]]
step = 0
calls = [
  { tool = "use_tool", to = "Mcp.notes.add", arguments = { a = 2, b = 40 } },
  { tool = "use_tool", to = "Mcp.notes.exfiltrate" },
]

[[turn]]
step = 1
message = "got: {results}"
final = true
"""
# `keeper` deletes `kept.txt` when its goal is "delete", else writes `<goal>.txt`.
APPROVAL_SCRIPT = """
[[turn]]
goal = "delete"
step = 0
[[turn.calls]]
tool = "use_tool"
to = "File.Delete"
arguments = { path = "kept.txt" }
deadline_ms = 60000

[[turn]]
step = 0
[[turn.calls]]
tool = "use_tool"
to = "File.Write"
arguments = { path = "{goal}.txt", content = "written for {goal}" }
deadline_ms = 60000

[[turn]]
step = 1
message = "done: {results}"
final = true
"""
# `sleeper` runs a command that waits until a file `go` appears in its workspace.
SLEEP_SCRIPT = """
[[turn]]
step = 0
[[turn.calls]]
tool = "use_tool"
to = "Shell.Exec"
[turn.calls.arguments]
argv = ["python3", "-c", "import os, time\\nwhile not os.path.exists('go'): time.sleep(0.1)"]

[[turn]]
step = 1
message = "went: {results}"
final = true
"""
SCRIPTS = {
    "gpt": FILES_SCRIPT,
    "claude": MCP_SCRIPT,
    "keeper": APPROVAL_SCRIPT,
    "sleeper": SLEEP_SCRIPT,
}
AGENT_TOOLS = {
    "gpt": ["File.Write", "File.Read"],
    "claude": ["Mcp.notes.add", "Mcp.notes.exfiltrate"],
    "keeper": ["File.Write", "File.Delete"],
    "sleeper": ["Shell.Exec"],
}


@dataclass
class ToolSystem:
    """The running system: its server and config, the tool runtime's workspaces, the MCP
    server's call record, and every process by actor id."""

    locked: LockedDown
    workspaces: Path
    mcp_calls: Path
    processes: dict[str, ProcessOutput]
    options: dict[str, object]

    @property
    def env(self) -> dict[str, str]:
        return parley_env(self.locked.server.url, self.locked.ns.root)

    def config(self, actor: str) -> tuple[str, str]:
        return "--config", str(self.locked.settings_file(actor))

    def actor_env(self, actor: str) -> dict[str, str]:
        env = self.env
        if actor in self.options:
            env["PARLEY_OPTIONS"] = json.dumps(self.options[actor])
        return env

    async def agent(self, name: str) -> None:
        """Start agent `name` (one of AGENT_TOOLS) unless it runs already: each test starts
        only the agent it asks, so a test process runs only the agents its tests use."""
        if name not in self.processes:
            argv = ("--profile", name, *self.config(name))
            self.processes[name] = start_actor("agent", name, self.actor_env(name), *argv)
            await self.processes[name].wait_line(READY)

    def cli(self, *argv: str, who: str = "cli") -> ProcessOutput:
        """`parley ARGV` as the person `who`, with that person's credentials."""
        return ProcessOutput([sys.executable, "-m", "tools", *argv, *self.config(who)], self.env)

    def assert_never_refused(self) -> None:
        """No process was ever refused by the broker (a grant missing from the config)."""
        for name, process in self.processes.items():
            refused = [line for line in process.lines if "permission" in line.lower()]
            assert not refused, f"{name}: {refused}"

    def assert_healthy(self) -> None:
        """Every process still runs, and none was ever refused by the broker."""
        for name, process in self.processes.items():
            assert process.process.poll() is None, f"{name} exited:\n" + "\n".join(process.lines)
        self.assert_never_refused()


def _write_agents(agents: Path) -> None:
    (agents / "scripts").mkdir(parents=True)
    for name, tools in AGENT_TOOLS.items():
        (agents / "scripts" / f"{name}.toml").write_text(SCRIPTS[name])
        (agents / f"{name}.toml").write_text(
            f'name = "{name}"\nmodel = "scripted"\ntools = {json.dumps(tools)}\n'
            f'[brain]\nbackend = "scripted"\nscript = "scripts/{name}.toml"\n'
        )


@asynccontextmanager
async def running_tool_system(
    root: Path, tools_env: Mapping[str, str] | None = None
) -> AsyncIterator[ToolSystem]:
    """Start the system under `root`; stop it on the way out, requiring every process to exit
    cleanly on SIGTERM. `tools_env`: more settings of the tool runtime (`PARLEY_QUOTAS`)."""
    ns = Namespace(f"t{uuid.uuid4().hex[:12]}")
    config_dir = root / "nats-config"
    write_nats_config(config_dir, [*LOCKED_ACTORS, "keeper", "sleeper", "person-bob"], ns)
    server = EmbeddedServer(root / "nats", authorization=config_dir / "authorization.conf")
    server.start()
    processes: dict[str, ProcessOutput] = {}
    try:
        locked = LockedDown(server, config_dir, ns)
        await locked.provision()
        signed, public = sign_bundle(json.dumps(BUNDLE).encode(), root / "keys")
        admin = await locked.connect("provisioner")
        try:
            await (await admin.jetstream().key_value(ns.bucket("policy"))).put("bundle", signed)
        finally:
            await admin.close()
        _write_agents(root / "agents")
        system = ToolSystem(locked, root / "workspaces", root / "mcp-calls.jsonl", processes, {})
        keys = {"policy_keys": [str(public)], "tenant": "demo"}
        notes = {
            "name": "notes",
            "command": sys.executable,
            "args": ["-m", "tests.support.mcp_tools_server", "--record", str(system.mcp_calls)],
            "cwd": str(REPO),
        }
        tools = {**keys, "workspaces": str(system.workspaces), "mcp_servers": [notes]}
        system.options = {
            "gate": keys,
            "tools": tools,
            **{name: {"agents_dir": str(root / "agents")} for name in AGENT_TOOLS},
        }
        for actor in ("gate", "router", "tools"):
            env = system.actor_env(actor) | (dict(tools_env or {}) if actor == "tools" else {})
            processes[actor] = start_actor(actor, actor, env, *system.config(actor))
        for process in processes.values():
            await process.wait_line(READY)
        yield system
        for process in processes.values():
            process.signal(signal.SIGTERM)
        for name, process in processes.items():
            assert await process.wait_exit() == 0, f"{name}:\n" + "\n".join(process.lines)
        system.assert_never_refused()
    finally:
        for process in processes.values():
            process.close()
        server.close()
