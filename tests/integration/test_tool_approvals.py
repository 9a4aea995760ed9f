"""A tool request that needs approval waits for its owner, every process its own user.

The agent's File.Write and File.Delete require approval (seed 002 §13.4). `parley say` prints
the held request with the two commands that decide it; another person's decision is ignored,
the owner's `parley approvals approve` runs the write, that approval replayed while the next
write waits decides nothing, `reject` denies the next one, and a delete nobody decides is
denied when its rule's timeout passes. Nothing is written that was
not approved.
"""

from __future__ import annotations

import json
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bus import EmbeddedServer
from schemas import Namespace
from tests.support.lockdown import LOCKED_ACTORS, LockedDown
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor
from tools.demo import sign_bundle
from tools.natsconf import write_nats_config

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
        "router": {"allowed_targets": ["gpt"], "start_traces": True},
        "cli": PERSON,
        "person-bob": PERSON,
        "tools": {},
        "gpt": {
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
SCRIPT = """
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
_DECIDE = re.compile(r"approve: parley approvals approve (\S+) --session (\S+)")


@pytest.fixture
def with_bob(tmp_path: Path, namespace: Namespace) -> Iterator[LockedDown]:
    config_dir = tmp_path / "nats-config"
    write_nats_config(config_dir, [*LOCKED_ACTORS, "person-bob"], namespace)
    server = EmbeddedServer(tmp_path / "nats", authorization=config_dir / "authorization.conf")
    server.start()
    yield LockedDown(server, config_dir, namespace)
    server.close()


async def test_held_writes_wait_for_their_owner_and_nothing_else(
    with_bob: LockedDown, tmp_path: Path
) -> None:
    locked, ns = with_bob, with_bob.ns
    await locked.provision()
    signed, public = sign_bundle(json.dumps(BUNDLE).encode(), tmp_path / "keys")
    admin = await locked.connect("provisioner")
    await (await admin.jetstream().key_value(ns.bucket("policy"))).put("bundle", signed)
    await admin.close()
    agents = tmp_path / "agents"
    (agents / "scripts").mkdir(parents=True)
    (agents / "scripts" / "gpt.toml").write_text(SCRIPT)
    (agents / "gpt.toml").write_text(
        'name = "gpt"\nmodel = "scripted"\ntools = ["File.Write", "File.Delete"]\n'
        '[brain]\nbackend = "scripted"\nscript = "scripts/gpt.toml"\n'
    )
    workspaces = tmp_path / "workspaces"
    env = parley_env(locked.server.url, ns.root)
    keys = {"policy_keys": [str(public)], "tenant": "demo"}

    def config(actor: str) -> tuple[str, str]:
        return "--config", str(locked.settings_file(actor))

    def options(**values: object) -> dict[str, str]:
        return {**env, "PARLEY_OPTIONS": json.dumps(values)}

    processes = [
        start_actor("gate", "gate", options(**keys), *config("gate")),
        start_actor("router", "router", env, *config("router")),
        start_actor(
            "tools", "tools", options(**keys, workspaces=str(workspaces)), *config("tools")
        ),
        start_actor(
            "agent", "gpt", options(agents_dir=str(agents)), "--profile", "gpt", *config("gpt")
        ),
    ]
    opened: list[ProcessOutput] = []

    def cli(*argv: str, who: str = "cli") -> ProcessOutput:
        process = ProcessOutput([sys.executable, "-m", "tools", *argv, *config(who)], env)
        opened.append(process)
        return process

    async def held(goal: str) -> tuple[ProcessOutput, str, str]:
        say = cli("say", "@gpt", goal)
        _, line = await say.wait_line(_DECIDE.pattern, timeout=30)
        found = _DECIDE.search(line)
        assert found is not None
        return say, found.group(1), found.group(2)

    try:
        for process in processes:
            await process.wait_line(READY)
        # Approved by its owner, after another person's approval was ignored.
        say, approval_id, session = await held("alpha")
        assert not list(workspaces.glob("*/alpha.txt"))  # held: nothing written yet
        decide = ("approvals", "approve", approval_id, "--session", session)
        bob = cli(*decide, "--wait", "3", who="person-bob")  # not his: it never ends for him
        assert await bob.wait_exit(60) == 1, "\n".join(bob.lines)
        assert not list(workspaces.glob("*/alpha.txt"))
        approve = cli("approvals", "approve", approval_id, "--session", session)
        assert await approve.wait_exit(60) == 0, "\n".join(approve.lines)
        assert "approved: File.Write SUCCEEDED" in approve.lines[-1]
        assert await say.wait_exit(60) == 0, "\n".join(say.lines)
        (written,) = workspaces.glob("*/alpha.txt")
        assert written.read_text() == "written for alpha"
        # A decision replayed: alpha's approval, sent again naming beta's session, decides
        # nothing (alpha's is decided, and an approval names one request only).
        alpha_id = approval_id
        say, approval_id, session = await held("beta")
        replay = cli("approvals", "approve", alpha_id, "--session", session, "--wait", "3")
        assert await replay.wait_exit(60) == 1, "\n".join(replay.lines)
        assert not list(workspaces.glob("*/beta.txt"))
        # Rejected: denied, nothing written.
        reject = cli("approvals", "reject", approval_id, "--session", session, "--reason", "no")
        assert await reject.wait_exit(60) == 0, "\n".join(reject.lines)
        assert await say.wait_exit(60) == 0
        assert "APPROVAL_DENIED" in "\n".join(say.lines), say.lines
        assert not list(workspaces.glob("*/beta.txt"))
        # Nobody decides: the rule's two seconds pass and the delete is denied.
        say, _, _ = await held("delete")
        assert await say.wait_exit(60) == 0
        assert "not decided in time" in "\n".join(say.lines), say.lines
        for process in processes:
            process.signal(signal.SIGTERM)
            assert await process.wait_exit() == 0
    finally:
        for process in [*processes, *opened]:
            process.close()
