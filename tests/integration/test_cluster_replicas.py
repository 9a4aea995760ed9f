"""Provisioning on a 3-node cluster replicates every stream and bucket three times; on a
single server once; an explicit `replicas` wins; an inferred count never shrinks a stream."""

from __future__ import annotations

import nats
import pytest
from nats.js import JetStreamContext

from bus import BUCKETS, EmbeddedCluster, EmbeddedServer, provision, stream_configs
from schemas import Namespace
from tools.provision import provision_once


async def _replicas(js: JetStreamContext, ns: Namespace) -> set[int]:
    """Replicas of every stream and bucket of `ns`, as JetStream reports them."""
    names = [config.name or "" for config in stream_configs(ns)]
    names += [f"KV_{ns.bucket(spec.name)}" for spec in BUCKETS]
    found = set()
    for name in names:
        info = await js.stream_info(name)
        found.add(info.config.num_replicas or 1)
        if (info.config.num_replicas or 1) > 1:  # replicated by a raft group of its own
            assert info.cluster is not None and info.cluster.raft_group
    return found


async def test_a_three_node_cluster_gets_three_replicas(
    cluster: EmbeddedCluster, namespace: Namespace
) -> None:
    nc = await nats.connect(cluster.url.split(","))
    try:
        js = nc.jetstream()
        assert await provision(js, namespace) == 3
        assert await _replicas(js, namespace) == {3}
        # An actor that infers fewer (a node down) leaves them as they are.
        assert await provision(js, namespace, replicas=None) == 3
        assert await _replicas(js, namespace) == {3}
    finally:
        await nc.close()


async def test_an_explicit_count_overrides_the_cluster(
    cluster: EmbeddedCluster, namespace: Namespace
) -> None:
    nc = await nats.connect(cluster.url.split(","))
    try:
        js = nc.jetstream()
        assert await provision(js, namespace, replicas=1) == 1
        assert await _replicas(js, namespace) == {1}
        assert await provision(js, namespace) == 3  # inferred: grows them
        assert await _replicas(js, namespace) == {3}
    finally:
        await nc.close()


async def test_parley_provision_on_a_cluster_says_three(
    cluster: EmbeddedCluster, namespace: Namespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARLEY_NAMESPACE", namespace.root)
    said = await provision_once(None, cluster.url)
    assert said.startswith(f"provisioned namespace {namespace.root} at 3 replicas:")


async def test_a_single_server_gets_one(nats_server: EmbeddedServer, namespace: Namespace) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        assert await provision(js, namespace) == 1
        assert await _replicas(js, namespace) == {1}
    finally:
        await nc.close()
