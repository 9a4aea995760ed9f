"""`parley up` is locked down by default, and every command works on it as its own role.

A person runs `parley up` in a directory and then, from the same directory and with no
`NATS_URL`, publishes a signed bundle, runs a collaboration, tails the traffic, queries and
verifies the audit history and prints a trace. Each command finds the system and its own
credentials under `.parley/` (tools/_local.py): the policy signer, the person and the audit
reader are users of their own, no process meets a permission violation, and a process with no
credentials is refused at the door.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from tests.support.processes import READY, REPO, SUPPORT_PATH, close_up, parley_up
from tests.support.system import finished, parley_cli
from tools.demo import DEMO_GOAL, sign_policy


def _env() -> dict[str, str]:
    """A person's shell: no NATS_URL, no namespace, nothing but the tests' support path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "PARLEY_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SUPPORT_PATH, env.get("PYTHONPATH")]))
    return env


async def _stranger(url: str) -> str:
    """What the server says to a client that logs in with no credentials (the wire protocol,
    so nothing of a client library's is left open)."""
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        await reader.readline()  # INFO
        writer.write(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
        await writer.drain()
        async with asyncio.timeout(10):
            return (await reader.readline()).decode()
    finally:
        writer.close()
        await writer.wait_closed()


def _topology(tmp_path: Path, gate_key: Path, audit_key: Path) -> Path:
    """The seed 001 topology with an auditor, configured by environment only."""

    def options(values: dict[str, object]) -> str:
        return "{ PARLEY_OPTIONS = '" + json.dumps(values) + "' }"  # a TOML literal string

    gate = options({"policy_keys": [str(gate_key)], "tenant": "demo"})
    auditor = options({"signing_key": str(audit_key), "tenant": "demo"})
    lines = ['[settings]\nlog_level = "info"\n']
    for name, run, env in [
        ("gate", "gate", gate),
        ("router", "router", None),
        ("auditor", "auditor", auditor),
        ("gpt", "agent", options({"profile": str(REPO / "deploy/agents/gpt.toml")})),
        ("claude", "agent", options({"profile": str(REPO / "deploy/agents/claude.toml")})),
    ]:
        lines.append(f'[[actor]]\nname = "{name}"\nrun = "{run}"\n')
        if env is not None:
            lines.append(f"env = {env}\n")
    path = tmp_path / "topology.toml"
    path.write_text("\n".join(lines))
    return path


async def test_parley_up_is_locked_and_each_command_acts_as_its_own_role(tmp_path: Path) -> None:
    signed, public = sign_policy(REPO / "deploy/policy/demo.toml", tmp_path / "keys")
    audit = Ed25519PrivateKey.generate()
    audit_key, audit_pub = tmp_path / "audit.key", tmp_path / "audit.pub"
    audit_key.write_bytes(audit.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    audit_key.chmod(0o600)
    audit_pub.write_bytes(
        audit.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    )
    env = _env()
    up = parley_up(_topology(tmp_path, public, audit_key), env, cwd=tmp_path)
    try:
        await up.wait_line(r"^\[nats\] embedded nats-server .*locked down")
        for actor in ("gate", "router", "auditor", "gpt", "claude"):
            await up.wait_line(rf"^\[{actor}\] .*{READY}")
        url = (tmp_path / ".parley" / "nats.url").read_text().strip()
        assert "Authorization Violation" in await _stranger(url)
        bundle = tmp_path / "demo.signed.json"
        bundle.write_bytes(signed)

        code, lines = await finished(
            parley_cli(env, "policy", "publish", str(bundle), cwd=tmp_path)
        )
        assert code == 0, lines
        tail = parley_cli(env, "tail", "--count", "3", cwd=tmp_path)
        await tail.wait_line(r"^tailing ")
        code, lines = await finished(parley_cli(env, "collab", DEMO_GOAL, cwd=tmp_path), 120)
        assert code == 0, lines
        assert any("final" in line for line in lines), lines
        code, seen = await finished(tail, 30)
        assert code == 0 and sum(line.startswith("[") for line in seen) >= 3, seen

        code, lines = await finished(
            parley_cli(env, "audit", "query", "--tenant", "demo", "--json", cwd=tmp_path)
        )
        assert code == 0, lines
        records = [json.loads(line) for line in lines if line.startswith("{")]
        assert records, lines
        code, lines = await finished(
            parley_cli(env, "trace", records[0]["trace_id"], "--tenant", "demo", cwd=tmp_path)
        )
        assert code == 0, lines
        code, lines = await finished(
            parley_cli(env, "audit", "verify", "--key", str(audit_pub), cwd=tmp_path)
        )
        assert code == 0 and any("audit chain intact" in line for line in lines), lines

        up.signal(signal.SIGINT)
        assert await up.wait_exit(timeout=20) == 0
        refused = [line for line in up.lines if "violation" in line.lower()]
        assert not refused, refused
    finally:
        close_up(up)


async def test_a_command_with_no_system_to_talk_to_says_what_to_set(tmp_path: Path) -> None:
    for argv in (("audit", "query", "--tenant", "demo"), ("tail", "--count", "1")):
        code, lines = await finished(parley_cli(_env(), *argv, cwd=tmp_path), 30)
        assert code == 3, lines  # nothing reached (docs/cli.md's exit codes)
        text = "\n".join(lines)
        assert "parley up" in text and "NATS_URL" in text, text
        assert "Traceback" not in text, text


async def test_a_bundle_published_by_hand_is_kept_by_the_next_systems_up(tmp_path: Path) -> None:
    """One example, then a bundle published by hand (docs/collaboration.md), then another
    example in the same directory: `parley up` must keep the published bundle and say so. It
    read the stored bundle as the policy signer, whose grants had no read of it, and exited 2
    on the broker's refusal (a newcomer's walk)."""
    env = _env()
    first = parley_up(REPO / "examples/collaborate", env, cwd=tmp_path)
    try:
        await first.wait_line(r"^\[nats\] published .* as policy version 1", timeout=60)
        await first.wait_line(r"^\[nats\] embedded nats-server .*locked down", timeout=60)
        own = tmp_path / "own.signed.json"
        key = tmp_path / ".parley" / "keys" / "policy.key"
        argv = ("policy", "sign", str(REPO / "examples/delegate/policy.toml"), "--key", str(key))
        code, lines = await finished(parley_cli(env, *argv, "-o", str(own), cwd=tmp_path))
        assert code == 0, lines
        code, lines = await finished(parley_cli(env, "policy", "publish", str(own), cwd=tmp_path))
        assert code == 0, lines
        first.signal(signal.SIGINT)
        assert await first.wait_exit(timeout=30) == 0
    finally:
        close_up(first)

    second = parley_up(REPO / "examples/delegate", env, cwd=tmp_path)
    try:
        await second.wait_line(r"^\[nats\] kept the policy bundle in force", timeout=60)
        await second.wait_line(r"^\[nats\] embedded nats-server .*locked down", timeout=30)
        second.signal(signal.SIGINT)
        assert await second.wait_exit(timeout=30) == 0
    finally:
        close_up(second)
    refused = [line for line in second.lines if "violation" in line.lower()]
    assert not refused, refused
