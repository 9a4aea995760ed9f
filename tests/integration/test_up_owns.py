"""`parley up` owns what it starts (docs/operations.md): its server and actors die with it
however it ends, its store takes one server at a time, and its server is restarted when it
dies.

Everything is real: `parley up` in a directory of its own, locked down, its children found by
the pids it prints, killed and signalled as a person or the kernel would. A process is gone
when its pidfd says it exited (a zombie waiting for its new parent to reap it runs nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import select
import signal
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from bus import RECONNECT_WINDOW_S
from bus._embedded import find_nats_server
from tests.support.processes import READY, REPO, SUPPORT_PATH, ProcessOutput, close_up, parley_up
from tests.support.system import finished, parley_cli
from tools._up import SERVER_INTENSITY, SERVER_PERIOD_S, SERVER_STABLE_S
from tools.demo import DEMO_GOAL, sign_policy

pytestmark = [pytest.mark.timeout(240), pytest.mark.chaos]

ACTORS = ("gate", "router", "auditor", "gpt", "claude")
STARTUP_S = 60.0
GONE_WITHIN_S = 2.0
SERVER_BACK_WITHIN_S = 5.0
THINKS_S = 4.0


def _env() -> dict[str, str]:
    """A person's shell: no NATS_URL, no namespace, nothing but the tests' support path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "PARLEY_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SUPPORT_PATH, env.get("PYTHONPATH")]))
    return env


class Home:
    """A directory where a person runs `parley up` with seed 001's actors and an auditor."""

    def __init__(self, root: Path, *, gpt_profile: Path = REPO / "deploy/agents/gpt.toml") -> None:
        self.root = root
        self.bundle = root / "demo.signed.json"
        signed, gate_key = sign_policy(REPO / "deploy/policy/demo.toml", root / "keys")
        self.bundle.write_bytes(signed)
        audit = Ed25519PrivateKey.generate()
        audit_key, self.audit_pub = root / "audit.key", root / "audit.pub"
        audit_key.write_bytes(
            audit.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        )
        audit_key.chmod(0o600)
        self.audit_pub.write_bytes(
            audit.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
        )
        self.topology = root / "topology.toml"
        self.topology.write_text(_topology(gate_key, audit_key, gpt_profile))
        self.env = _env()

    async def up(self) -> ProcessOutput:
        """`parley up` started here, every actor ready."""
        up = parley_up(self.topology, self.env, cwd=self.root)
        await up.wait_line(r"^\[nats\] embedded nats-server .*locked down", timeout=STARTUP_S)
        for actor in ACTORS:
            await up.wait_line(rf"^\[{actor}\] .*{READY}", timeout=STARTUP_S)
        return up

    def cli(self, *argv: str) -> ProcessOutput:
        return parley_cli(self.env, *argv, cwd=self.root)

    async def publish_policy(self) -> None:
        code, lines = await finished(self.cli("policy", "publish", str(self.bundle)))
        assert code == 0, lines

    async def audit(self, *argv: str) -> list[str]:
        code, lines = await finished(self.cli("audit", *argv), 60)
        assert code == 0, lines
        return lines

    async def stored_sessions(self) -> set[str]:
        lines = await self.audit("query", "--tenant", "demo", "--json")
        return {json.loads(line)["session_id"] for line in lines if line.startswith("{")}


def _topology(gate_key: Path, audit_key: Path, gpt_profile: Path) -> str:
    def options(values: dict[str, object]) -> str:
        return "{ PARLEY_OPTIONS = '" + json.dumps(values) + "' }"  # a TOML literal string

    envs = {
        "gate": options({"policy_keys": [str(gate_key)], "tenant": "demo"}),
        "auditor": options({"signing_key": str(audit_key), "tenant": "demo"}),
        "gpt": options({"profile": str(gpt_profile)}),
        "claude": options({"profile": str(REPO / "deploy/agents/claude.toml")}),
    }
    runs = {"gate": "gate", "router": "router", "auditor": "auditor"}
    lines = ['[settings]\nlog_level = "info"\n']
    for name in ACTORS:
        lines.append(f'[[actor]]\nname = "{name}"\nrun = "{runs.get(name, "agent")}"\n')
        if name in envs:
            lines.append(f"env = {envs[name]}\n")
    return "\n".join(lines)


def _pids(up: ProcessOutput) -> set[int]:
    """`parley up` and every process it said it started."""
    said = {int(m.group(1)) for line in up.lines if (m := re.search(r"\(pid (\d+)\)", line))}
    return {up.pid, *said}


def _wait_gone(pids: set[int], timeout: float) -> set[int]:
    """Wait until every one of `pids` has exited (its pidfd turns readable); those left."""
    fds = {}
    for pid in pids:
        try:
            fds[os.pidfd_open(pid)] = pid
        except ProcessLookupError:  # gone, and reaped already
            continue
    deadline = time.monotonic() + timeout
    try:
        waiting = set(fds)
        while waiting and (left_s := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select(list(waiting), [], [], left_s)
            waiting -= set(ready)
        return {fds[fd] for fd in waiting}
    finally:
        for fd in fds:
            os.close(fd)


def _kill_left(pids: set[int]) -> None:
    """Kill what a failed test left running (a `parley up` that did not own its children)."""
    for pid in _wait_gone(pids, 0):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _servers_in(root: Path) -> list[int]:
    """The nats-servers running with `root` as their directory (`parley up` starts its own
    there, with a store under `.parley/`)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            running = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
            here = Path(os.readlink(entry / "cwd")) == root
        except OSError:
            continue
        if running and here and argv[0].endswith(b"nats-server"):
            found.append(int(entry.name))
    return found


async def _collab(home: Home, *extra: str) -> list[str]:
    code, lines = await finished(home.cli("collab", *extra, DEMO_GOAL), 120)
    assert code == 0, lines
    assert any("final" in line for line in lines), lines
    return lines


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGHUP], ids=["SIGKILL", "SIGHUP"])
async def test_up_ended_by_a_signal_leaves_nothing_and_starts_again_on_an_intact_store(
    tmp_path: Path, stop: signal.Signals
) -> None:
    home = Home(tmp_path)
    first = await home.up()
    second: ProcessOutput | None = None
    pids = _pids(first)
    try:
        await home.publish_policy()
        await _collab(home)
        before = await home.stored_sessions()
        assert before
        pids = _pids(first)

        first.signal(stop)  # SIGHUP: what closing its terminal sends

        left = _wait_gone(pids, GONE_WITHIN_S)
        assert not left, f"still running {GONE_WITHIN_S} s after {stop.name}: {sorted(left)}"
        assert first.process.wait(10) == (-signal.SIGKILL if stop is signal.SIGKILL else 0)
        assert not _servers_in(tmp_path)

        second = await home.up()
        assert len(_servers_in(tmp_path)) == 1
        assert before <= await home.stored_sessions()  # every session seen to end is stored
        lines = await home.audit("verify", "--key", str(home.audit_pub))
        assert any("audit chain intact" in line for line in lines), lines
        await _collab(home)  # and the system runs on it
    finally:
        close_up(first)
        _kill_left(pids)
        if second is not None:
            close_up(second)


@pytest.mark.parametrize("store", [[], ["--store", "second-store"]], ids=["same", "own store"])
async def test_a_second_up_in_the_same_directory_is_refused_naming_the_first(
    tmp_path: Path, store: list[str]
) -> None:
    """On the same store or on one of its own: both would share `.parley/` (the second's
    stop removed the first's URL, which then ran on unreachable)."""
    home = Home(tmp_path)
    first = await home.up()
    try:
        parley = tmp_path / ".parley"
        kept = {name: (parley / name).read_text() for name in ("nats.url", "up.pid")}
        url = kept["nats.url"].strip()
        second = parley_up(home.topology, home.env, *store, cwd=tmp_path)
        try:
            assert await second.wait_exit(timeout=20) == 2, second.lines
        finally:
            close_up(second)
        refusal = [line for line in second.lines if line.startswith("parley up:")]
        assert len(refusal) == 1, second.lines
        assert f"pid {first.pid} ({url})" in refusal[0], refusal
        assert len(_servers_in(tmp_path)) == 1
        assert not (tmp_path / "second-store").exists()
        assert {name: (parley / name).read_text() for name in kept} == kept  # left alone
        await home.publish_policy()  # the first runs on, reachable as before
        first.signal(signal.SIGTERM)
        assert await first.wait_exit(timeout=30) == 0
    finally:
        close_up(first)


async def test_a_store_another_up_runs_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """`parley up --store` naming the store of a `parley up` running elsewhere is refused; it
    wrote the system's keys and the LLM gateway's settings, with any provider key, first (an
    operator's walk)."""
    home = Home(tmp_path / "first")
    first = await home.up()
    try:
        elsewhere = tmp_path / "second"
        elsewhere.mkdir()
        store = home.root / ".parley" / "nats"
        env = {**home.env, "OPENAI_API_KEY": "sk-not-to-be-written"}
        second = parley_up(None, env, "--store", str(store), cwd=elsewhere)
        try:
            assert await second.wait_exit(timeout=30) == 2, second.lines
        finally:
            close_up(second)
        assert [line for line in second.lines if line.startswith("parley up:")], second.lines
        written = sorted(str(p.relative_to(elsewhere)) for p in elsewhere.rglob("*"))
        assert not [p for p in written if "keys" in p or p.endswith("llm.toml")], written
    finally:
        close_up(first)


async def test_a_url_left_by_a_killed_up_is_not_followed(tmp_path: Path) -> None:
    home = Home(tmp_path)
    first = await home.up()
    pids = _pids(first)
    try:
        first.signal(signal.SIGKILL)
        assert not _wait_gone(pids, GONE_WITHIN_S)
        assert (tmp_path / ".parley" / "nats.url").is_file()  # nobody was left to remove it
        code, lines = await finished(home.cli("audit", "query", "--tenant", "demo"), 30)
        assert code == 2, lines
        assert any("no local system running: start it with `parley up`" in x for x in lines), lines
    finally:
        close_up(first)
        _kill_left(pids)


SLOW_GPT_SCRIPT = f"""
[[turn]]
goal = "fairy tale"
round = 1
delay_s = {THINKS_S}
message = "Paragraph one needs a draft first."
handoff = {{ to = "claude", task = "Draft paragraph one of the fairy tale." }}

[[turn]]
goal = "fairy tale"
message = "Final tale. Mira and Ember lit the village every winter after. The end."
final = true
"""


def _slow_gpt(root: Path) -> Path:
    """gpt's demo profile, thinking `THINKS_S` over its first turn: the session is in flight
    while the server is killed and restarted."""
    agents = root / "agents"
    agents.mkdir()
    (agents / "slow-gpt.toml").write_text(SLOW_GPT_SCRIPT)
    profile = (REPO / "deploy/agents/gpt.toml").read_text()
    profile = profile.replace('script = "scripts/gpt.toml"', 'script = "slow-gpt.toml"')
    assert 'script = "slow-gpt.toml"' in profile
    (agents / "gpt.toml").write_text(profile)
    return agents / "gpt.toml"


async def test_a_killed_server_is_back_on_its_url_and_a_session_in_flight_completes(
    tmp_path: Path,
) -> None:
    """And the command waiting on the session waits for it, even when the restart comes later
    than a command's usual reconnect window: `parley up` is stopped (SIGSTOP) while its server
    is down, so it cannot restart it before the window has passed twice over."""
    home = Home(tmp_path, gpt_profile=_slow_gpt(tmp_path))
    up = await home.up()
    try:
        await home.publish_policy()
        _, said = await up.wait_line(r"^\[nats\] embedded nats-server \(pid (\d+)\) ready at")
        match = re.search(r"\(pid (\d+)\) ready at (\S+)", said)
        assert match is not None
        server_pid, url = int(match.group(1)), match.group(2)
        collab = home.cli("collab", "--max-rounds", "6", DEMO_GOAL)
        try:
            await collab.wait_line(r"^session \S+: gpt, claude", timeout=60)  # gpt thinks
            seen = len(up.lines)
            up.signal(signal.SIGSTOP)
            try:
                os.kill(server_pid, signal.SIGKILL)
                # The fault's length, not a synchronisation: the server stays down this long.
                await asyncio.sleep(2 * RECONNECT_WINDOW_S)
                assert collab.process.poll() is None, collab.lines
            finally:
                up.signal(signal.SIGCONT)
            killed_at = time.monotonic()
            await up.wait_line(
                r"^\[nats\] exited \(signal SIGKILL\); restarting in", start=seen, timeout=10
            )
            _, back = await up.wait_line(
                r"^\[nats\] restarted \(pid \d+\) at ", start=seen, timeout=SERVER_BACK_WITHIN_S
            )
            assert time.monotonic() - killed_at < SERVER_BACK_WITHIN_S
            assert back.endswith(f" at {url}"), back
            code = await collab.wait_exit(120)
        finally:
            collab.close()
        assert code == 0, collab.lines
        assert any("final" in line for line in collab.lines), collab.lines
        for actor in ACTORS:  # nobody crash-looped: each kept its first process
            assert not [line for line in up.lines if line.startswith(f"[{actor}] exited")], (
                actor,
                up.lines[-40:],
            )
        up.signal(signal.SIGTERM)
        assert await up.wait_exit(timeout=30) == 0
    finally:
        close_up(up)


async def test_a_server_that_keeps_dying_is_given_up_on_by_name(tmp_path: Path) -> None:
    topology = tmp_path / "echo.toml"
    topology.write_text('[[actor]]\nname = "echo-a"\nrun = "echo"\n')
    up = parley_up(topology, _env(), "--open-broker", cwd=tmp_path)
    try:
        index, line = await up.wait_line(
            r"^\[nats\] embedded nats-server \(pid \d+\)", timeout=STARTUP_S
        )
        for kill in range(1, SERVER_INTENSITY + 2):
            match = re.search(r"\(pid (\d+)\)", line)
            assert match is not None
            os.kill(int(match.group(1)), signal.SIGKILL)
            if kill <= SERVER_INTENSITY:
                index, line = await up.wait_line(
                    r"^\[nats\] restarted \(pid \d+\)", start=index + 1, timeout=15
                )
        assert await up.wait_exit(timeout=30) == 1
        await up.wait_line(
            r"^parley up: giving up: nats-server keeps dying: it exited \(signal SIGKILL\) "
            rf"{SERVER_INTENSITY + 1} times within {SERVER_PERIOD_S:g}s"
        )
        assert not [line for line in up.lines if line.startswith("[echo-a] exited")]
    finally:
        close_up(up)


async def test_restarts_that_fail_back_off_longer_each_time(tmp_path: Path) -> None:
    """A server that cannot start again is retried after 0.5, 1, 2 and 4 s, as one that
    restarts and dies again is; once the first server had held `SERVER_STABLE_S`, the
    backoff started over at every failed attempt (five tries 0.5 s apart, given up on within
    3 s: an operator's walk), since each failure was judged against that first start. Here
    the binary refuses to run once its first server is up (`PARLEY_NATS_SERVER`, a script
    that execs the real one until told not to)."""
    broken = tmp_path / "broken"
    wrapper = tmp_path / "nats-server"
    wrapper.write_text(
        f'#!/bin/sh\n[ -e "{broken}" ] && exit 3\nexec "{find_nats_server()}" "$@"\n'
    )
    wrapper.chmod(0o755)
    topology = tmp_path / "echo.toml"
    topology.write_text('[[actor]]\nname = "echo-a"\nrun = "echo"\n')
    env = {**_env(), "PARLEY_NATS_SERVER": str(wrapper)}
    up = parley_up(topology, env, "--open-broker", cwd=tmp_path)
    try:
        _, line = await up.wait_line(
            r"^\[nats\] embedded nats-server \(pid \d+\)", timeout=STARTUP_S
        )
        found = re.search(r"\(pid (\d+)\)", line)
        assert found is not None, line
        # The clock passing is the point: a server that held this long counts as stable,
        # and a failure after it starts the backoff over, once, from 0.5 s.
        await asyncio.sleep(SERVER_STABLE_S + 0.5)
        broken.touch()
        os.kill(int(found.group(1)), signal.SIGKILL)
        assert await up.wait_exit(timeout=60) == 1
    finally:
        close_up(up)
    said = "\n".join(up.lines)
    delays = re.findall(r"^\[nats\] exited \(.*\); restarting in ([\d.]+)s$", said, re.M)
    assert delays == ["0.5", "1", "2", "4", "4"], up.lines[-30:]
    assert "giving up: nats-server keeps dying" in said, up.lines[-30:]
    # A failed restart's reason (the server's last words) is the server's on every line.
    failed_at = next(i for i, line in enumerate(up.lines) if "restart failed" in line)
    reason = up.lines[failed_at : failed_at + 3]
    assert all(line.startswith("[nats] ") for line in reason), reason
