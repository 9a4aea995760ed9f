"""`parley up`: a topology of supervised actor processes, restarted when killed."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path

import httpx
import pytest

from bus import EmbeddedServer, load_topology
from bus._ports import free_port
from schemas import Namespace
from tests.support.processes import REPO, ProcessOutput, close_up, parley_env, parley_up

SMOKE = REPO / "deploy" / "topologies" / "smoke.toml"


def test_smoke_topology_loads() -> None:
    """The smallest topology: two echo actors and the console, on a free port (several
    `parley up` on one machine must not collide on a fixed one) written to .parley/."""
    topology = load_topology(SMOKE)
    assert [a.name for a in topology.actor] == ["echo-a", "echo-b", "console"]
    assert topology.child_env(topology.actor[0])["PARLEY_ACTOR_ID"] == "echo-a"
    console = topology.child_env(topology.actor[2])
    assert json.loads(console["PARLEY_OPTIONS"]) == {
        "port": 0,
        "url_file": ".parley/console.url",
    }


@pytest.mark.chaos
async def test_up_restarts_a_killed_child_and_stops_cleanly(
    nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    env = parley_env(nats_server.url, namespace.root)
    up = parley_up(SMOKE, env, cwd=tmp_path)  # the console writes .parley/console.url there
    try:
        await up.wait_line(r'^\[echo-a\] .*"msg":"ready"')
        await up.wait_line(r'^\[echo-b\] .*"msg":"ready"')
        _, started = await up.wait_line(r"^\[echo-b\] started \(pid (\d+)\)")
        match = re.search(r"pid (\d+)", started)
        assert match is not None
        # On a server of its choosing it still owns `.parley/` (the console's URL, the metrics
        # targets): a second here is refused, naming it, before writing anything.
        second = parley_up(SMOKE, env, cwd=tmp_path)
        try:
            assert await second.wait_exit(timeout=20) == 2, second.lines
            assert any(f"`parley up` pid {up.pid}: stop it" in x for x in second.lines), second
        finally:
            close_up(second)
        os.kill(int(match.group(1)), signal.SIGKILL)
        index, _ = await up.wait_line(r"^\[echo-b\] exited \(signal SIGKILL\); restarting")
        await up.wait_line(r'^\[echo-b\] .*"msg":"ready"', start=index)
        up.signal(signal.SIGINT)
        assert await up.wait_exit(timeout=10) == 0
        await up.wait_line(r"^parley up: stopped")
        await up.wait_line(r"^\[echo-a\] stopped \(code 0\)")
    finally:
        close_up(up)


async def test_up_gives_up_on_a_crash_looping_child(
    nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    topology = tmp_path / "looping.toml"
    topology.write_text(
        'intensity = 2\nperiod_s = 30\n[[actor]]\nname = "broken"\nrun = "no_such_module:Actor"\n'
    )
    up = parley_up(topology, parley_env(nats_server.url, namespace.root), cwd=tmp_path)
    try:
        assert await up.wait_exit(timeout=30) == 1
        await up.wait_line(r"exceeds intensity 2: giving up")
    finally:
        close_up(up)


async def test_up_runs_in_a_directory_with_packages_named_like_parleys(
    nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    """A person's own `tools/` and `bus/` beside them are not imported by Parley's children
    (`python -m tools run …` put the working directory first on their path)."""
    for package in ("tools", "bus", "schemas"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text(
            f'raise SystemExit("the person\'s own {package} package was imported")\n'
        )
    topology = tmp_path / "echo.toml"
    topology.write_text('[[actor]]\nname = "echo-a"\nrun = "echo"\n')
    parley = Path(sys.executable).parent / "parley"  # the console script a person runs
    env = parley_env(nats_server.url, namespace.root)
    up = ProcessOutput([str(parley), "up", str(topology)], env, name="up", cwd=tmp_path)
    try:
        await up.wait_line(r'^\[echo-a\] .*"msg":"ready"')
        assert not [line for line in up.lines if "own" in line and "package" in line], up.lines
        up.signal(signal.SIGTERM)
        assert await up.wait_exit(timeout=10) == 0
    finally:
        close_up(up)


async def test_up_given_a_nats_url_where_nothing_listens_says_so_at_once(
    tmp_path: Path, namespace: Namespace
) -> None:
    """Not every actor started to die reconnecting, and `giving up` on restarts 35 s later."""
    url = f"nats://127.0.0.1:{free_port()}"  # drawn free, and nothing started on it
    topology = tmp_path / "echo.toml"
    topology.write_text('[[actor]]\nname = "echo-a"\nrun = "echo"\n')
    up = parley_up(topology, parley_env(url, namespace.root), cwd=tmp_path)
    try:
        assert await up.wait_exit(timeout=20) == 3, up.lines
    finally:
        close_up(up)
    assert up.lines == [
        f"parley up: no NATS server answers at {url} (NATS_URL): start one there, or unset "
        "NATS_URL for `parley up` to start its own"
    ]


async def test_up_starts_the_embedded_server_without_nats_url(
    tmp_path: Path, namespace: Namespace
) -> None:
    env = parley_env("unused", namespace.root)
    del env["NATS_URL"]
    home = tmp_path / "home"
    home.mkdir()
    up = parley_up(SMOKE, env, "--store", str(tmp_path / "store"), cwd=home)
    try:
        await up.wait_line(
            r"^\[nats\] embedded nats-server \(pid \d+\) ready at nats://127\.0\.0\.1:\d+"
        )
        await up.wait_line(r'^\[echo-a\] .*"msg":"ready"')
        # The console of the default topology: its URL printed for a person and written to
        # .parley/ for scripts, on a port the system chose.
        _, line = await up.wait_line(r"^\[console\] Console: http://127\.0\.0\.1:\d+/ ")
        url = line.split("Console: ", 1)[1].split(" ", 1)[0]
        assert (home / ".parley" / "console.url").read_text().strip() == url
        async with httpx.AsyncClient(base_url=url) as client:
            page = await client.get("/")
        assert page.status_code == 200
        assert "Parley console" in page.text
        up.signal(signal.SIGTERM)
        assert await up.wait_exit(timeout=10) == 0
        assert not (home / ".parley" / "console.url").exists()  # no URL for a stopped console
    finally:
        close_up(up)
