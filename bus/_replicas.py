"""How many replicas a namespace's streams get when nobody said: read from the cluster the
client is connected to.

The server's INFO names the cluster it belongs to and the client URLs of the nodes it is
routed to (`connect_urls`): three or more call for `CLUSTER_REPLICAS` replicas, fewer for
one, so a single server, or a cluster that hides its nodes (`no_advertise`), gets one.

A node tells its clients only of the nodes its routes reach now. Right after a cluster starts,
or while a node restarts, a client can be told of fewer than the cluster has, and a namespace
provisioned then was made at one replica in a cluster of three: an acknowledged write then
lives on one node, and that node's loss loses it. So provisioning a fresh namespace (its
streams not made yet) on a node of a cluster that names fewer waits, up to
`_ROUTES_WAIT_S`, to be told of the rest: nats-py adds each node a later INFO names to its
server pool and calls its discovered-server callback. An existing namespace is never shrunk
(bus/_provision.py): an actor that starts while a node is down keeps its streams as they are.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from schemas import Namespace

__all__ = ("CLUSTER_REPLICAS", "cluster_replicas", "clustered", "inferred_replicas")

log = logging.getLogger("parley.bus.provision")

CLUSTER_REPLICAS = 3
"""Replicas on a cluster big enough: a majority survives the loss of any one node."""

_ROUTES_WAIT_S = 10.0
"""How long provisioning a fresh namespace waits to be told of the cluster's other nodes:
routes form within a second or two of a node's start; longer means a node is down."""


def cluster_replicas(server_info: dict[str, Any]) -> int:
    """The replicas fit for the server that sent this INFO: `CLUSTER_REPLICAS` when it
    belongs to a cluster of at least that many nodes clients can reach, else 1."""
    if not clustered(server_info):
        return 1
    nodes = len(set(server_info.get("connect_urls") or ()))
    return CLUSTER_REPLICAS if nodes >= CLUSTER_REPLICAS else 1


def clustered(server_info: dict[str, Any]) -> bool:
    """The server belongs to a cluster and runs JetStream."""
    return bool(server_info.get("cluster")) and bool(server_info.get("jetstream"))


def _nodes_told(nc: NATS) -> int:
    """Nodes the server has told the client of: the client URLs of the INFO it connected
    with, and those later INFOs added to its pool (`discovered`). URLs the client was given
    are left out: they name nodes that may be down, or one node twice (a host name and the
    address it advertises)."""
    told = set(nc._server_info.get("connect_urls") or ())
    told.update(server.uri.netloc for server in nc._server_pool if server.discovered)
    return len(told)


class _Waiters:
    """One connection's provisionings waiting to be told of more nodes. nats-py has one
    discovered-server callback a connection: it is wrapped once, and each waiter is an
    event it sets, so provisionings that overlap on one connection never undo each other's."""

    def __init__(self, nc: NATS) -> None:
        self.events: set[asyncio.Event] = set()
        previous = nc._discovered_server_cb

        async def discovered() -> None:
            if previous is not None:
                await previous()
            if _nodes_told(nc) >= CLUSTER_REPLICAS:
                for event in self.events:
                    event.set()

        nc._discovered_server_cb = discovered


_waiting: weakref.WeakKeyDictionary[NATS, _Waiters] = weakref.WeakKeyDictionary()


async def _fresh(js: JetStreamContext, ns: Namespace) -> bool:
    """`ns` has no streams yet: its submissions' stream is not there."""
    try:
        await js.stream_info(ns.stream("submit"))
    except NotFoundError:
        return True
    return False


async def inferred_replicas(js: JetStreamContext, ns: Namespace) -> int:
    """The replicas `ns`'s streams call for on the server `js` is connected to; for a fresh
    namespace on a node of a cluster, after waiting to be told of the cluster's other nodes
    (module doc). A wait that ends without them gives one, and says so in the log."""
    # nats-py keeps the server's INFO (cluster name, connect_urls) only privately.
    nc: NATS = js._nc
    replicas = cluster_replicas(nc._server_info)
    if replicas >= CLUSTER_REPLICAS or not clustered(nc._server_info):
        return replicas
    if not await _fresh(js, ns):
        return replicas
    waiters = _waiting.get(nc)
    if waiters is None:
        waiters = _waiting[nc] = _Waiters(nc)
    told = asyncio.Event()
    waiters.events.add(told)
    try:
        if _nodes_told(nc) < CLUSTER_REPLICAS:
            await asyncio.wait_for(told.wait(), _ROUTES_WAIT_S)
    except TimeoutError:
        log.warning(
            "the cluster names fewer nodes than replicated streams need: provisioning at one "
            "replica; set `replicas` to make them replicated once every node is up",
            extra={"cluster": nc._server_info.get("cluster"), "nodes": _nodes_told(nc)},
        )
        return replicas
    finally:
        waiters.events.discard(told)
    return CLUSTER_REPLICAS
