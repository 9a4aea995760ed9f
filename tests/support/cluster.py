"""Waiting for a real cluster's routes: until a node tells its clients of every node."""

from __future__ import annotations

import asyncio

import nats

__all__ = ("told_of_every_node",)


async def told_of_every_node(url: str, count: int) -> None:
    """Wait (up to 30 s) until the node at `url` lists `count` nodes in its clients' INFO.

    A node can follow the metadata leader with a route to one peer only, and a client of it
    then sees a cluster of two."""
    told = asyncio.Event()

    async def discovered() -> None:
        # The client's pool: the node itself and every node its INFOs named (nats-py keeps
        # only the first INFO as `_server_info`; later ones add to the pool).
        if len(client._server_pool) >= count:
            told.set()

    client = await nats.connect(url, discovered_server_cb=discovered)
    try:
        await discovered()  # the INFO it connected with may list them all already
        await asyncio.wait_for(told.wait(), 30)
    finally:
        await client.close()
