"""The permissions the server refused an actor's connection, and start-up look-ups that stop
waiting once it has.

A request the broker refuses is never answered: the server reports the violation to the
connection's error callback (bus/_connection.py `on_refused`) and the request itself times
out, as a request does while a cluster elects a leader. `through_elections` would then ask
again for 45 s, saying "electing a leader?", before it failed with a bare timeout: what an
actor started under grants an earlier release wrote (before `parley nats-config` ran again)
met. `ConnectionRefusals` passes each refusal on to whoever listens at that moment;
`asked_at_start` listens while its look-up runs, and stops waiting at the first timeout once
a refusal came during it, saying what was refused and how to grant it.

Only a refusal told while the look-up runs counts (one told before, of something else, says
nothing about it), and only a timeout is taken as refused: a `503` is an answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from bus._elections import through_elections
from bus._settings import ConfigError

__all__ = ("ConnectionRefusals", "asked_at_start")

T = TypeVar("T")


class ConnectionRefusals:
    """The permission violations one connection is told of, passed on to the listeners of
    the moment (a wait for an answer that will not come can end there)."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[str], None]] = []

    def note(self, error: str) -> None:
        """Give to `connect(on_refused=...)`: called with the server's words."""
        for listener in list(self._listeners):
            listener(error)

    def listen(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Tell `listener` each refusal from now on; returns what stops it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)


async def asked_at_start(
    refusals: ConnectionRefusals, call: Callable[[], Awaitable[T]], what: str
) -> T:
    """`through_elections(call, what)`, but a request left unanswered once the server refused
    this connection a permission while it was being asked is taken as refused, not as an
    election to wait out.

    Raises:
        ConfigError: a timeout after a refusal told during the look-up: the actor's
            credentials lack a grant (named, with the command that writes it).
        Whatever `call` raised otherwise, as `through_elections` does.
    """
    said: list[str] = []

    async def attempt() -> T:
        try:
            return await call()
        except TimeoutError:  # nats-py's timeouts are TimeoutErrors too
            if said:  # refused while it was asked: no election to wait out
                raise _Refused from None
            raise

    stop_listening = refusals.listen(said.append)
    try:
        return await through_elections(attempt, what)
    except _Refused:
        raise ConfigError(
            f"{what}: the server refused this actor's request ({said[0].strip()}): its "
            "credentials lack the grant. After an upgrade, run `parley nats-config` again and "
            "restart nats-server with the config it writes (`parley up` does both)"
        ) from None
    finally:
        stop_listening()


class _Refused(Exception):
    """A look-up timed out after a refusal: no election's error, so it is not asked again."""
