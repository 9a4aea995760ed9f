"""A cluster `EmbeddedCluster.start` hands back is whole: every node counts every node in the
JetStream metadata group. A new cluster's first leader adds its peers to the group one by one
after its election; killed before the last was added, it left two nodes whose group named
only it and one of them, and neither could be elected (CI met it as `no JetStream metadata
leader within 30 s` right after a test killed the leader of a cluster just started)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from bus import EmbeddedCluster, NatsServerError

pytestmark = pytest.mark.chaos


def _group_size(nodes: EmbeddedCluster, name: str) -> int:
    """How many nodes the metadata group names, as node `name` says on `/jsz`."""
    with urllib.request.urlopen(f"{nodes.node(name).monitor_url}/jsz", timeout=5) as response:
        return int(json.load(response)["meta_cluster"]["cluster_size"])


def test_a_started_cluster_elects_another_leader_when_its_first_is_killed_at_once(
    tmp_path: Path,
) -> None:
    nodes = EmbeddedCluster(3, tmp_path / "cluster")
    nodes.start()
    try:
        assert [_group_size(nodes, name) for name in nodes.names] == [3, 3, 3]
        first = nodes.wait_meta_leader()
        nodes.kill(first)
        assert nodes.wait_meta_leader(30, not_on=first) != first
    finally:
        nodes.close()


def test_a_cluster_of_one_node_is_refused_at_once(tmp_path: Path) -> None:
    """nats-server's metadata group of one clustered node never elects a leader: `parley up
    --cluster 1` waited 30 s and failed; it is refused before any node starts."""
    with pytest.raises(NatsServerError, match="at least two nodes"):
        EmbeddedCluster(1, tmp_path / "cluster")
