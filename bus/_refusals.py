"""The permissions the server refused an actor's connection, and start-up look-ups that stop
waiting once it has.

A request the broker refuses is never answered: the server reports the violation to the
connection's error callback (bus/_connection.py `on_refused`) and the request itself times
out, as a request does while a cluster elects a leader. `through_elections` would then ask
again for 45 s, saying "electing a leader?", before it failed with a bare timeout: what an
actor started under grants an earlier release wrote (before `parley nats-config` ran again)
met. `ConnectionRefusals` remembers the first refusal; `asked_at_start` stops waiting at the
first timeout after one, and says what was refused and how to grant it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from bus._elections import is_election_error, through_elections
from bus._settings import ConfigError

__all__ = ("ConnectionRefusals", "asked_at_start")

T = TypeVar("T")


class ConnectionRefusals:
    """The permission violations one connection was told of: the first one's words, and an
    event set at it (a wait for an answer that will not come can end there)."""

    def __init__(self) -> None:
        self.refused = asyncio.Event()
        self.first = ""

    def note(self, error: str) -> None:
        """Give to `connect(on_refused=...)`: called with the server's words."""
        if not self.first:
            self.first = error
        self.refused.set()


async def asked_at_start(
    refusals: ConnectionRefusals, call: Callable[[], Awaitable[T]], what: str
) -> T:
    """`through_elections(call, what)`, but a request left unanswered after the server refused
    this connection a permission is taken as refused, not as an election to wait out.

    Raises:
        ConfigError: the request went unanswered once a permission had been refused: the
            actor's credentials lack a grant (named, with the command that writes it).
        Whatever `call` raised otherwise, as `through_elections` does.
    """
    try:
        return await through_elections(call, what, stop=refusals.refused)
    except Exception as exc:
        if not (refusals.refused.is_set() and is_election_error(exc)):
            raise
        raise ConfigError(
            f"{what}: the server refused this actor's request ({refusals.first.strip()}): "
            "its credentials lack the grant. After an upgrade, run `parley nats-config` "
            "again and restart nats-server with the config it writes (`parley up` does both)"
        ) from None
