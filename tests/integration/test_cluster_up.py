"""`parley up --cluster 3`: three locked-down nodes on loopback, the streams provisioned at
three replicas, the topology's actors running against the URL list."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from bus import connect, load_settings, stream_configs
from schemas import Namespace
from tests.support.processes import REPO, close_up, parley_env, parley_up

SMOKE = REPO / "deploy" / "topologies" / "smoke.toml"


@pytest.mark.timeout(240)
async def test_up_cluster_runs_the_topology_on_three_replicated_nodes(
    tmp_path: Path, namespace: Namespace
) -> None:
    env = parley_env("unused", namespace.root)
    del env["NATS_URL"]
    up = parley_up(SMOKE, env, "--cluster", "3", cwd=tmp_path)
    try:
        for node in ("n1", "n2", "n3"):
            await up.wait_line(rf"^\[nats\] node {node} \(pid \d+\) at nats://127\.0\.0\.1:\d+$")
        _, ready = await up.wait_line(
            r"^\[nats\] embedded 3-node cluster ready at (nats://127\.0\.0\.1:\d+,?){3} "
            r"\(store .*, locked down: "
        )
        await up.wait_line(r'^\[echo-a\] .*"msg":"ready"')
        await up.wait_line(r'^\[echo-b\] .*"msg":"ready"')
        urls = (tmp_path / ".parley" / "nats.url").read_text().strip()
        assert urls in ready and len(urls.split(",")) == 3
        provisioner = tmp_path / ".parley" / "broker" / "actors" / "provisioner.toml"
        nc = await connect(load_settings(provisioner, nats_url=urls), "provisioner")
        try:
            js = nc.jetstream()
            for config in stream_configs(namespace):
                info = await js.stream_info(config.name or "")
                assert info.config.num_replicas == 3, config.name
        finally:
            await nc.close()
        # A node that dies is said (it was not: a walk's operator knew only from the
        # streams' warnings) and stays down until `parley up` is started again, below.
        _, n2 = await up.wait_line(r"^\[nats\] node n2 \(pid (\d+)\)")
        os.kill(int(n2.split("(pid ")[1].split(")")[0]), signal.SIGKILL)
        await up.wait_line(r"^\[nats n2\] exited \(signal 9\); not restarted", timeout=30)
        up.signal(signal.SIGTERM)
        assert await up.wait_exit(timeout=30) == 0
    finally:
        close_up(up)
    # Started again on its stores (operations.md: a node that died stays down until then):
    # its provisioning met streams still electing their leaders and failed (`nats: timeout`)
    # in 7 of 8 restarts of a newcomer's walk.
    again = parley_up(SMOKE, env, "--cluster", "3", cwd=tmp_path)
    try:
        await again.wait_line(r'^\[echo-a\] .*"msg":"ready"', timeout=90)
        await again.wait_line(r'^\[echo-b\] .*"msg":"ready"', timeout=30)
        again.signal(signal.SIGTERM)
        assert await again.wait_exit(timeout=30) == 0
    finally:
        close_up(again)
