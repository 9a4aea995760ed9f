"""The A2A edge's grants (actors/a2a/): the least an actor facing the network needs."""

from __future__ import annotations

from typing import Final

from tools.natsconf._grants import JS_API, Grants

__all__ = ("A2A", "a2a_grants")

A2A: Final = "a2a"


def a2a_grants(g: Grants) -> None:
    """It reads the signed bundle by a stored message's get (which agents are exposed; it
    verifies the bundle itself), never through a consumer (_operator.py says why creating one
    is a grant to write), and submits nothing in its own name: it acts for each client only
    with that client's own credentials. Its heartbeat and dead letters are every actor's."""
    stream = f"KV_{g.ns.bucket('policy')}"
    g.pub(f"{JS_API}.STREAM.INFO.{stream}", f"{JS_API}.STREAM.MSG.GET.{stream}")
