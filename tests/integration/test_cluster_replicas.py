"""Provisioning on a 3-node cluster replicates every stream and bucket three times; on a
single server once; an explicit `replicas` wins; an inferred count never shrinks a stream."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from bus import BUCKETS, EmbeddedCluster, EmbeddedServer, provision, stream_configs
from schemas import Namespace
from tests.support.cluster import told_of_every_node
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


async def _told_of_fewer_than_three(servers: list[str], closed: asyncio.Queue[str]) -> NATS:
    """A client of one of `servers` connected once its node names two nodes only: each try
    that still names three waits for a node's next log line of a route to n3 closed."""
    for _ in range(20):
        client = await nats.connect(servers)
        if len(set(client._server_info.get("connect_urls") or ())) < 3:
            return client
        await client.close()
        await asyncio.wait_for(closed.get(), 10)
    raise AssertionError(f"{servers} still name three nodes")


@contextlib.asynccontextmanager
async def _n3_down(
    tmp_path: Path, servers: Callable[[EmbeddedCluster], list[str]], *, killed: bool = True
) -> AsyncIterator[tuple[EmbeddedCluster, NATS]]:
    """A formed 3-node cluster with n3 down (SIGKILLed, or stopped when not `killed`), and a
    client connected to `servers` whose node names only n1 and n2, as a node does whose route
    to a peer is not (yet) there."""
    loop = asyncio.get_running_loop()
    closed: asyncio.Queue[str] = asyncio.Queue()

    def on_log(node: str, line: str) -> None:
        if "Router connection closed" in line and "Remote: n3" in line:
            loop.call_soon_threadsafe(closed.put_nowait, line)

    nodes = EmbeddedCluster(3, tmp_path / "cluster", on_log=on_log)
    nodes.start()
    try:
        for url in nodes.url.split(","):  # every route formed before one is cut
            await told_of_every_node(url, 3)
        while not closed.empty():  # lines of routes replaced while forming
            closed.get_nowait()
        if killed:
            nodes.kill("n3")
        else:
            await asyncio.to_thread(nodes.node("n3").stop)
        await asyncio.to_thread(nodes.wait_meta_leader, not_on="n3")  # JetStream answers
        nc = await _told_of_fewer_than_three(servers(nodes), closed)
        try:
            yield nodes, nc
        finally:
            await nc.close()
    finally:
        nodes.close()


async def test_provisioning_a_fresh_namespace_waits_until_the_cluster_names_every_node(
    tmp_path: Path, namespace: Namespace
) -> None:
    """A node told its clients only of the nodes its routes reached then: while they formed
    or a node restarted, provisioning made one-replica streams in a cluster of three. A fresh
    namespace now waits to be told of the third node, and gets three replicas."""
    async with _n3_down(tmp_path, lambda nodes: [nodes.node("n1").url]) as (nodes, nc):
        provisioning = asyncio.ensure_future(provision(nc.jetstream(), namespace))
        await asyncio.to_thread(nodes.restart, "n3")
        assert await asyncio.wait_for(provisioning, 60) == 3
        assert await _replicas(nc.jetstream(), namespace) == {3}


async def test_nodes_a_client_was_given_do_not_count_as_told(
    tmp_path: Path,
    namespace: Namespace,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Given every node's URL (as deploy/cluster's NATS_URL does) while n3 is down, the client
    knows three URLs but the server names two: the wait ends, the namespace gets one replica
    and a warning, as before this wait. Counting the given URLs asked for three replicas,
    which JetStream cannot place with a node down: provisioning failed after 20 s.

    n3 is stopped, not killed: JetStream takes a SIGKILLed node for online until it has not
    been heard from for 150 s, so a one-replica stream could be placed on it and never be
    created (the creation timed out here one run in about twenty); a stopping node says it
    is going."""
    monkeypatch.setattr("bus._replicas._ROUTES_WAIT_S", 0.5)
    async with _n3_down(tmp_path, lambda nodes: nodes.url.split(","), killed=False) as (_, nc):
        assert await asyncio.wait_for(provision(nc.jetstream(), namespace), 15) == 1
        assert await _replicas(nc.jetstream(), namespace) == {1}
    assert any("set `replicas`" in record.getMessage() for record in caplog.records)


async def test_a_cluster_that_never_names_three_nodes_gets_one_replica_and_a_warning(
    tmp_path: Path,
    namespace: Namespace,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two nodes are all there is: the wait ends, the streams get one replica as before, and
    the log says why and what to set."""
    monkeypatch.setattr("bus._replicas._ROUTES_WAIT_S", 0.5)
    nodes = EmbeddedCluster(2, tmp_path / "cluster")
    nodes.start()
    try:
        nc = await nats.connect(nodes.node("n1").url)
        try:
            assert await provision(nc.jetstream(), namespace) == 1
            assert await _replicas(nc.jetstream(), namespace) == {1}
        finally:
            await nc.close()
    finally:
        nodes.close()
    assert any("set `replicas`" in record.getMessage() for record in caplog.records)
