"""deploy/cluster/: three node configs nats-server accepts, each fsyncing every write, routed
to all three, and running the least-privilege users of `parley nats-config`."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bus import find_nats_server
from tests.support.processes import REPO

CLUSTER = REPO / "deploy" / "cluster"
NODES = ("n1", "n2", "n3")


@pytest.mark.parametrize("node", NODES)
def test_nats_server_accepts_the_node_config(node: str, tmp_path: Path) -> None:
    shutil.copyfile(CLUSTER / f"{node}.conf", tmp_path / f"{node}.conf")
    shutil.copyfile(REPO / "deploy/nats/authorization.conf", tmp_path / "authorization.conf")
    checked = subprocess.run(
        [str(find_nats_server()), "-t", "-c", str(tmp_path / f"{node}.conf")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr + checked.stdout


@pytest.mark.parametrize("node", NODES)
def test_each_node_is_durable_routed_and_locked_down(node: str) -> None:
    text = (CLUSTER / f"{node}.conf").read_text()
    assert f"server_name: {node}\n" in text
    assert "sync_interval: always" in text
    assert re.findall(r'"nats-route://(n\d):6222"', text) == list(NODES)
    assert 'include "authorization.conf"' in text
