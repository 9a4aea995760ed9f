"""The grants of the actors that face people or the network: the A2A edge (actors/a2a/) and
the web console (actors/console/), the least each needs."""

from __future__ import annotations

from typing import Final

from tools.natsconf._grants import JS_API, Grants

__all__ = ("A2A", "a2a_grants", "console_grants")

A2A: Final = "a2a"


def a2a_grants(g: Grants) -> None:
    """It reads the signed bundle (which agents are exposed; it verifies the bundle itself)
    and submits nothing in its own name: it acts for each client only with that client's own
    credentials. Its heartbeat and dead letters are every actor's."""
    _bundle_by_get(g)


def console_grants(g: Grants) -> None:
    """It reads the signed bundle (seed 002 §6: no session starts under no trusted bundle;
    it verifies the bundle itself) and submits nothing in its own name: it acts for each
    person only with that person's own credentials."""
    _bundle_by_get(g)


def _bundle_by_get(g: Grants) -> None:
    """The policy bucket's stored values by a stored message's get (bus/_bundle_reader.py),
    never through a consumer (_operator.py says why creating one is a grant to write)."""
    stream = f"KV_{g.ns.bucket('policy')}"
    g.pub(f"{JS_API}.STREAM.INFO.{stream}", f"{JS_API}.STREAM.MSG.GET.{stream}")
