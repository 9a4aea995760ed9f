"""A failing `parley` command says what happened and what to do next in one line
(tools/_errors.py, docs/cli.md); its traceback only with `--debug`.

Every run is the real command as a child process, against a real nats-server: none at all
(a port nothing listens on), one that runs no Parley system, and one locked down by
`parley nats-config`'s least-privilege config, where a command given another role's
credentials is refused by the broker itself.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from nats.aio.client import Client as NATS

from bus import ELECTION_BOUND_S, EmbeddedServer
from schemas import Namespace
from tests.support.lockdown import LockedDown
from tests.support.processes import ProcessOutput, parley_env
from tools.natsconf import write_nats_config

RUN_WITHIN_S = 60.0


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


async def run_parley(env: dict[str, str], cwd: Path, *argv: str) -> Ran:
    """`parley ARGV` as a child process in `cwd`, to its end (bounded)."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tools",
        *argv,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(child.communicate(), RUN_WITHIN_S)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    assert child.returncode is not None
    return Ran(child.returncode, out.decode(), err.decode())


@pytest.fixture
def nowhere() -> Iterator[str]:
    """A NATS URL where nothing listens: a loopback port bound but never listening, so the
    OS refuses every connection and no other process can take the port meanwhile."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"nats://127.0.0.1:{held.getsockname()[1]}"


async def test_no_server_is_one_line_and_the_traceback_is_for_debug(
    nowhere: str, namespace: Namespace, tmp_path: Path
) -> None:
    env = parley_env(nowhere, namespace.root)
    plain = await run_parley(env, tmp_path, "collab", "plan a hike")
    assert plain.code == 3, plain
    assert len(plain.err_lines) == 1, plain.err
    line = plain.err_lines[0]
    assert line.startswith("parley collab: no NATS server answers at " + nowhere), line
    assert "`parley up`" in line
    assert "Traceback" not in plain.err

    debug = await run_parley(env, tmp_path, "--debug", "collab", "plan a hike")
    assert debug.code == 3, debug
    assert "Traceback (most recent call last)" in debug.err, debug.err
    assert debug.err_lines[-1] == line  # the same line still closes it

    by_env = await run_parley({**env, "PARLEY_DEBUG": "1"}, tmp_path, "collab", "plan a hike")
    assert "Traceback (most recent call last)" in by_env.err, by_env.err


@pytest.mark.parametrize(
    "command",
    [("calls", "last"), ("trace", "last"), ("audit", "query"), ("storage",)],
    ids=lambda command: command[0],
)
async def test_a_command_that_reads_says_no_server_as_a_waiting_one_does(
    nowhere: str, namespace: Namespace, tmp_path: Path, command: tuple[str, ...]
) -> None:
    """Exit 3 and one line, its traceback under --debug: the commands that only read history
    exited 2 (as for a bad setting), and `calls` had no traceback to give."""
    env = parley_env(nowhere, namespace.root)
    plain = await run_parley(env, tmp_path, *command)
    assert plain.code == 3, plain
    assert len(plain.err_lines) == 1, plain.err
    assert plain.err_lines[0].startswith(f"parley {command[0]}: no NATS server answers at "), plain

    debug = await run_parley(env, tmp_path, "--debug", *command)
    assert debug.code == 3, debug
    assert "Traceback (most recent call last)" in debug.err, debug.err


async def test_a_server_that_takes_connections_and_never_answers_is_said_so_soon(
    namespace: Namespace, tmp_path: Path
) -> None:
    """A stopped (SIGSTOP) server accepts the socket and never answers: commands waited about
    two minutes, a connect timeout per try, then told the person to start a `parley up` that
    was running (an operator's walk). Two tries, then what it is."""
    server = EmbeddedServer(tmp_path / "nats")
    await asyncio.to_thread(server.start)
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        ran = await run_parley(parley_env(server.url, namespace.root), tmp_path, "storage")
        took = time.monotonic() - started
    finally:
        os.kill(server.pid, signal.SIGCONT)
        server.close()
    assert ran.code == 3, ran
    assert ran.err_lines[-1] == (
        f"parley storage: the NATS server at {server.url} takes connections but does not answer "
        "them: it is stopped (SIGSTOP), overloaded, or no NATS server listens there"
    ), ran.err
    assert took < 20, f"{took:.0f} s"  # two tries of 5 s, where it took two minutes


async def test_a_server_without_parley_is_one_line_not_a_traceback(
    private_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    """A nats-server runs but no Parley system does (nothing provisioned): the submit finds no
    stream. That escaped from a TaskGroup as a traceback."""
    env = parley_env(private_server.url, namespace.root)
    ran = await run_parley(env, tmp_path, "collab", "--timeout", "10", "plan a hike")
    assert ran.code == 3, ran
    assert "Traceback" not in ran.err
    assert ran.err_lines == [
        "parley collab: no stream stored what this command sent: the NATS server answers, but "
        "Parley's system does not run on it: is `parley up` running in this directory? "
        "(or set NATS_URL to your server)"
    ], ran.err


async def test_another_roles_credentials_are_refused_naming_role_and_subject(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    """`parley trace` acts as the audit reader; given the person's settings file it connects
    as `cli`, which the broker refuses the audit reader's replies and JetStream calls."""
    await locked_down.provision()
    env = parley_env(locked_down.server.url, locked_down.ns.root)
    cli = str(locked_down.settings_file("cli"))
    ran = await run_parley(env, tmp_path, "trace", "some-trace", "--config", cli)
    assert ran.code == 2, ran
    assert "Traceback" not in ran.err
    assert len(ran.err_lines) == 1, ran.err  # no bare "permission violation" lines
    line = ran.err_lines[0]
    assert line.startswith(
        'parley trace: the broker refused `cli` to receive replies on "_inbox_audit-'
    )
    assert "this command acts as `audit-cli`, not `cli`" in line, line


async def test_a_role_lacking_a_grant_is_told_which_jetstream_call(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    """`parley storage` connects as whoever its settings name: the person `cli` may not ask
    for stream information, and the line names that API call."""
    await locked_down.provision()
    env = parley_env(locked_down.server.url, locked_down.ns.root)
    cli = str(locked_down.settings_file("cli"))
    ran = await run_parley(env, tmp_path, "storage", "--config", cli)
    assert ran.code == 3, ran  # storage's own code for a server it cannot use
    assert "Traceback" not in ran.err
    assert len(ran.err_lines) == 1, ran.err
    line = ran.err_lines[0]
    assert line.startswith(
        'parley storage: the broker refused `cli` to call the JetStream API STREAM.INFO ("$js.'
    ), line
    assert "the broker's config does not grant it to `cli`" in line, line


async def test_a_stream_the_audit_reader_may_not_read_is_refused_not_waited_out(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    """`audit verify --stream` of a stream outside the audit reader's grants: said as the
    broker's refusal once its request goes unanswered, not asked again for 50 s as if a
    cluster were electing (a single server has no election)."""
    await locked_down.provision()
    env = parley_env(locked_down.server.url, locked_down.ns.root)
    key = tmp_path / "audit.pub"
    key.write_bytes(
        Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    )
    reader = str(locked_down.settings_file("audit-cli"))
    started = time.monotonic()
    argv = ("audit", "verify", "--stream", "NOPE", "--key", str(key), "--config", reader)
    ran = await run_parley(env, tmp_path, *argv)
    took = time.monotonic() - started
    assert ran.code == 2, ran
    assert ran.err_lines == [ran.err_lines[0]] and "Traceback" not in ran.err, ran.err
    assert ran.err_lines[0].startswith(
        "parley audit verify: the broker refused `audit-cli` to call the JetStream API "
        'STREAM.INFO ("$js.'
    ), ran.err
    assert "cluster" not in ran.err and took < ELECTION_BOUND_S / 2, (took, ran.err)


async def test_tailing_a_subject_the_audit_reader_may_not_read_is_said(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    """`parley tail other.>`: the broker refuses the subscription; the command said nothing
    and waited for messages that could never come."""
    await locked_down.provision()
    env = parley_env(locked_down.server.url, locked_down.ns.root)
    reader = str(locked_down.settings_file("audit-cli"))
    ran = await run_parley(env, tmp_path, "tail", "other.>", "--config", reader)
    assert ran.code == 2, ran
    refusal = [line for line in ran.err_lines if line.startswith("parley tail:")]
    assert len(refusal) == 1 and "Traceback" not in ran.err, ran.err
    assert refusal[0].startswith(
        'parley tail: the broker refused `audit-cli` to subscribe to "other.>"'
    )


async def test_credentials_of_another_server_are_said_to_be_rejected(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    """A settings file written for another server: the server answers and rejects the key,
    which is not "no NATS server answers"."""
    elsewhere = tmp_path / "elsewhere"
    write_nats_config(elsewhere, ["cli"], locked_down.ns)
    env = parley_env(locked_down.server.url, locked_down.ns.root)
    settings = str(elsewhere / "actors" / "cli.toml")
    ran = await run_parley(env, tmp_path, "collab", "--config", settings, "plan a hike")
    assert ran.code == 3, ran
    assert ran.err_lines == [
        "parley collab: the server rejected the credentials of `cli` (not a user of this "
        "server): use the settings file written for this server (`parley up` writes them under "
        ".parley/broker/actors/ in this directory; `parley nats-config` under its --out), or "
        "set NATS_URL to the server they were written for"
    ], ran.err


async def test_an_actor_whose_credentials_the_server_rejects_refuses_to_start_at_once(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    """A newcomer's walk ran `parley run a2a` against a `parley up` that has no `a2a` user:
    some 70 "authorization violation" warnings over 30 s, then "bus unavailable ...
    NoServersError" and exit 3, which reads as a server down. Now: one error naming the
    credentials, exit 2, before its `server_wait_s` (60 s) of waiting for a server."""
    elsewhere = tmp_path / "elsewhere"
    write_nats_config(elsewhere, ["gpt"], locked_down.ns)
    env = parley_env(locked_down.server.url, locked_down.ns.root)
    settings = str(elsewhere / "actors" / "gpt.toml")
    started = time.monotonic()
    ran = await run_parley(env, tmp_path, "run", "echo", "--id", "gpt", "--config", settings)
    assert ran.code == 2, ran
    assert time.monotonic() - started < 30, ran
    assert "rejected the credentials of `gpt`" in ran.err and "bus unavailable" not in ran.err


async def test_bench_fails_in_one_line_too(namespace: Namespace, tmp_path: Path) -> None:
    """`parley bench` has its own parser and the same handling: an output path under a file."""
    env = parley_env("nats://127.0.0.1:4222", namespace.root)
    argv = ("bench", "--only", "context", "--out", "/dev/null/bench.json")
    ran = await run_parley(env, tmp_path, *argv)
    assert ran.code == 2, ran
    assert "Traceback" not in ran.err
    assert ran.err_lines == ["parley bench: File exists: /dev/null; check the path"], ran.err
    debug = await run_parley(env, tmp_path, "--debug", *argv)
    assert "Traceback (most recent call last)" in debug.err, debug.err


async def test_reading_the_audit_of_a_server_without_parley_says_so(
    private_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    """It said "reading PARLEY_AUDIT from 1: 503 b''"."""
    env = parley_env(private_server.url, namespace.root)
    ran = await run_parley(env, tmp_path, "trace", "some-trace")
    assert ran.code == 2, ran
    assert ran.err_lines == [
        f"parley trace: no stream {namespace.stream('audit')} on this server (503, no "
        "responders): is Parley's system running here, provisioned? (`parley up` in this "
        "directory)"
    ], ran.err


async def test_an_approval_interrupted_while_it_waits_says_the_decision_stands(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    """Ctrl-C during `approvals approve --wait` exited 130 without a word, though the decision
    had been sent and would apply (a newcomer's walk)."""
    env = parley_env(nats_server.url, namespace.root)
    argv = ("approvals", "approve", "a1", "--session", "s1", "--wait", "60")
    approve = ProcessOutput([sys.executable, "-m", "tools", *argv], env, name="ap", cwd=tmp_path)
    try:
        await approve.wait_line(r"^waiting for the tool's result", timeout=30)  # sent by then
        approve.signal(signal.SIGINT)
        code = await approve.wait_exit(30)
    finally:
        approve.close()
    assert code == 130, approve.lines
    assert approve.lines[-1] == (
        "interrupted: the decision on a1 was sent, and stands; `parley approvals list` shows "
        "whether the request still waits"
    ), approve.lines
    stored = await nc.jetstream().stream_info(namespace.stream("submit"))
    assert stored.state.messages == 1  # the decision, kept for the gate


async def test_mcp_over_http_with_no_server_writes_no_token(
    nowhere: str, namespace: Namespace, tmp_path: Path
) -> None:
    """It wrote `.parley/mcp-cli.token`, a credential for a server it never served, before
    finding no NATS server (a newcomer's walk)."""
    ran = await run_parley(parley_env(nowhere, namespace.root), tmp_path, "mcp", "--http", "0")
    assert ran.code == 3, ran
    assert not (tmp_path / ".parley").exists(), list((tmp_path / ".parley").iterdir())
