"""An agent uses tools through the gate and the tool runtime, every process its own user.

`parley say @gpt` asks a scripted agent whose profile offers File.Write and File.Read; its
brain writes a note, reads it back, then tries a path outside its scope. The gate checks each
request against the signed bundle's scope before delivery, the runtime checks again on the
real file system, and the agent's answer carries what came back: the note's text as data
with its provenance, and the refusal with its code. The file exists in the session's
workspace, and nothing outside it was read.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

from tests.support.lockdown import LockedDown
from tests.support.processes import READY, REPO, ProcessOutput, parley_env, start_actor
from tools.demo import sign_bundle

BUNDLE = {
    "schema_version": "1.0",
    "version": 1,
    "tenant_id": "demo",
    "expires_at": "2099-01-01T00:00:00Z",
    "profiles": {
        "router": {"allowed_targets": ["gpt"], "start_traces": True},
        "cli": {"allowed_targets": ["router"], "start_traces": True, "speaks_for_person": True},
        "tools": {},  # the tool runtime only answers: a profile with every default
        "gpt": {
            "allowed_targets": ["router", "tools"],
            "capabilities": ["File.Read", "File.Write"],
            "scopes": [
                {"name": "File.Write", "allowed_paths": ["."], "max_file_size_bytes": 1000},
                {"name": "File.Read", "allowed_paths": ["."]},
            ],
        },
    },
}

SCRIPT = """
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


def _agent_profile(directory: Path) -> None:
    (directory / "scripts").mkdir(parents=True)
    (directory / "scripts" / "gpt.toml").write_text(SCRIPT)
    (directory / "gpt.toml").write_text(
        'name = "gpt"\nmodel = "scripted"\ntools = ["File.Write", "File.Read"]\n'
        '[brain]\nbackend = "scripted"\nscript = "scripts/gpt.toml"\n'
    )


async def test_an_agent_writes_and_reads_a_file_and_is_refused_outside_its_scope(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    signed, public = sign_bundle(json.dumps(BUNDLE).encode(), tmp_path / "keys")
    admin = await locked.connect("provisioner")
    await (await admin.jetstream().key_value(ns.bucket("policy"))).put("bundle", signed)
    await admin.close()
    agents = tmp_path / "agents"
    _agent_profile(agents)
    workspaces = tmp_path / "workspaces"
    env = parley_env(locked.server.url, ns.root)
    keys = {"policy_keys": [str(public)], "tenant": "demo"}
    gate_env = {**env, "PARLEY_OPTIONS": json.dumps(keys)}
    tools_env = {**env, "PARLEY_OPTIONS": json.dumps({**keys, "workspaces": str(workspaces)})}
    agent_env = {**env, "PARLEY_OPTIONS": json.dumps({"agents_dir": str(agents)})}

    def config(actor: str) -> tuple[str, str]:
        return "--config", str(locked.settings_file(actor))

    processes = [
        start_actor("gate", "gate", gate_env, *config("gate")),
        start_actor("router", "router", env, *config("router")),
        start_actor("tools", "tools", tools_env, *config("tools")),
        start_actor("agent", "gpt", agent_env, "--profile", "gpt", *config("gpt")),
    ]
    try:
        for process in processes:
            await process.wait_line(READY)
        argv = [sys.executable, "-m", "tools", "say", *config("cli"), "@gpt", "keep a note"]
        cli = ProcessOutput(argv, env)
        try:
            code = await cli.wait_exit(60)
        finally:
            cli.close()
        said = "\n".join(cli.lines)
        assert code == 0, said
        assert "data from File.Read" in said and "hi from gpt" in said, said
        assert "CAPABILITY_DENIED" in said and "/etc/hostname" in said, said
        (written,) = workspaces.glob("*/notes/today.txt")
        assert written.read_text() == "hi from gpt"
        for process in processes:
            process.signal(signal.SIGTERM)
            assert await process.wait_exit() == 0
        for process in processes:
            refused = [line for line in process.lines if "permission" in line.lower()]
            assert not refused, f"{process.name}: {refused}"
    finally:
        for process in processes:
            process.close()


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


async def test_an_mcp_servers_tools_are_capabilities_through_the_gate(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    """An MCP server written with the SDK, run by the runtime over stdio: the bundle grants
    one of its tools by name; the other, whose description tells a model to ignore its
    policy, is refused by the gate before the server sees a call."""
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    bundle = json.loads(json.dumps(BUNDLE))
    bundle["profiles"]["gpt"]["capabilities"] = ["Mcp.notes.add"]
    signed, public = sign_bundle(json.dumps(bundle).encode(), tmp_path / "keys")
    admin = await locked.connect("provisioner")
    await (await admin.jetstream().key_value(ns.bucket("policy"))).put("bundle", signed)
    await admin.close()
    agents = tmp_path / "agents"
    (agents / "scripts").mkdir(parents=True)
    (agents / "scripts" / "gpt.toml").write_text(MCP_SCRIPT)
    (agents / "gpt.toml").write_text(
        'name = "gpt"\nmodel = "scripted"\ntools = ["Mcp.notes.add", "Mcp.notes.exfiltrate"]\n'
        '[brain]\nbackend = "scripted"\nscript = "scripts/gpt.toml"\n'
    )
    record = tmp_path / "calls.jsonl"
    server = {
        "name": "notes",
        "command": sys.executable,
        "args": ["-m", "tests.support.mcp_tools_server", "--record", str(record)],
        "cwd": str(REPO),
    }
    env = parley_env(locked.server.url, ns.root)
    keys = {"policy_keys": [str(public)], "tenant": "demo"}
    tools_options = {**keys, "workspaces": str(tmp_path / "ws"), "mcp_servers": [server]}

    def config(actor: str) -> tuple[str, str]:
        return "--config", str(locked.settings_file(actor))

    def options(values: object) -> dict[str, str]:
        return {**env, "PARLEY_OPTIONS": json.dumps(values)}

    processes = [
        start_actor("gate", "gate", options(keys), *config("gate")),
        start_actor("router", "router", env, *config("router")),
        start_actor("tools", "tools", options(tools_options), *config("tools")),
        start_actor(
            "agent", "gpt", options({"agents_dir": str(agents)}), "--profile", "gpt", *config("gpt")
        ),
    ]
    try:
        for process in processes:
            await process.wait_line(READY)
        argv = [sys.executable, "-m", "tools", "say", *config("cli"), "@gpt", "add"]
        cli = ProcessOutput(argv, env)
        try:
            code = await cli.wait_exit(60)
        finally:
            cli.close()
        said = "\n".join(cli.lines)
        assert code == 0, said
        assert "data from Mcp.notes.add" in said and "42" in said, said
        assert "TOOL_NOT_ALLOWED" in said and "Mcp.notes.exfiltrate" in said, said
        called = [json.loads(line)["tool"] for line in record.read_text().splitlines()]
        assert called == ["add"]
        for process in processes:
            process.signal(signal.SIGTERM)
            assert await process.wait_exit() == 0
    finally:
        for process in processes:
            process.close()
