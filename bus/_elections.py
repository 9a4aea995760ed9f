"""Riding through a cluster election: retry a JetStream request while nobody can answer it.

While a replicated stream, a consumer or the metadata group elects a leader, JetStream API
requests go unanswered (nats-py's `TimeoutError` after its request timeout) or are answered
`503` (no responders, "JetStream system temporarily unavailable", a publish's
`NoStreamResponseError`). Nothing is wrong with the request: asked again once a leader is
elected, it succeeds. An actor that let such an error escape would exit and count against
its supervisor's restart limit (`parley up` gives up past 5 restarts in 30 s), so a few
elections in a row would stop a deployment.

`through_elections` asks again with a short backoff (0.25, 0.5, 1, 2, 2, ... s) for at most
`ELECTION_BOUND_S` (45 s: nats-server's raft elections take up to about 9 s each, and a
starved machine has been seen to need several in a row), then lets the last error through:
a cluster that stays without quorum still ends the process, with that error, instead of
keeping it waiting forever. Every other error goes through at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nats.errors import NoRespondersError
from nats.js import JetStreamContext
from nats.js.errors import APIError, NoStreamResponseError, ServiceUnavailableError

from bus._replicas import clustered

__all__ = (
    "ELECTION_BACKOFF_S",
    "ELECTION_BOUND_S",
    "is_election_error",
    "through_elections",
    "through_elections_if_clustered",
)

log = logging.getLogger("parley.bus.elections")

ELECTION_BOUND_S = 45.0
"""How long a request is asked again while the cluster elects, before its error is final."""
ELECTION_BACKOFF_S = (0.25, 0.5, 1.0, 2.0)
"""The waits between attempts; the last one repeats."""

_UNAVAILABLE = 503

T = TypeVar("T")


_NOT_AN_ELECTION = frozenset({10023, 10039, 10076, 10077})
"""`503`s no election ends: insufficient resources (10023), JetStream not enabled for the
account (10039) or at all (10076), a stream's bytes or messages at their limit (10077). Asked
again for 45 s, a full stream held provisioning (and a publish into it) for nothing."""


def is_election_error(exc: BaseException) -> bool:
    """Whether `exc` is what a request meets while a leader is being elected: a timeout, or
    a `503` (no responders, or JetStream saying it is temporarily unavailable), but for the
    `503`s that say something lasting (`_NOT_AN_ELECTION`)."""
    if isinstance(exc, APIError) and getattr(exc, "err_code", None) in _NOT_AN_ELECTION:
        return False
    if isinstance(
        exc, TimeoutError | NoRespondersError | NoStreamResponseError | ServiceUnavailableError
    ):
        # nats.errors.TimeoutError is a TimeoutError too; a pull's 503 status raises
        # ServiceUnavailableError without a code.
        return True
    return isinstance(exc, APIError) and getattr(exc, "code", None) == _UNAVAILABLE


async def through_elections(
    call: Callable[[], Awaitable[T]],
    what: str,
    *,
    bound_s: float = ELECTION_BOUND_S,
    stop: asyncio.Event | None = None,
) -> T:
    """`await call()`, asked again while it fails as during an election, for up to `bound_s`.

    Args:
        call: Makes one fresh attempt each time it is called.
        what: Names the request in the log ("the policy watch", ...).
        bound_s: After this long (from the first attempt) the election error is final.
        stop: Set to give up waiting early (the last error is raised at once).

    Raises:
        Whatever `call` raised: at once if it is not an election's error, else once
        `bound_s` has run out (or `stop` was set).
    """
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            return await call()
        except Exception as exc:
            if not is_election_error(exc):
                raise
            waited = time.monotonic() - started
            pause = ELECTION_BACKOFF_S[min(attempt, len(ELECTION_BACKOFF_S) - 1)]
            if stop is not None and stop.is_set():  # told to give up: no election to blame
                log.debug("stopped asking", extra={"request": what, "error": repr(exc)})
                raise
            if waited + pause > bound_s:
                log.error(
                    "the cluster did not answer in time: giving up",
                    extra={"request": what, "waited_s": round(waited, 2), "error": repr(exc)},
                )
                raise
            log.warning(
                "the cluster did not answer (electing a leader?): asking again",
                extra={"request": what, "attempt": attempt + 1, "error": repr(exc)},
            )
            attempt += 1
            if stop is None:
                await asyncio.sleep(pause)
            else:
                try:
                    await asyncio.wait_for(stop.wait(), timeout=pause)
                except TimeoutError:
                    pass


async def through_elections_if_clustered(
    js: JetStreamContext, call: Callable[[], Awaitable[T]], what: str
) -> T:
    """`through_elections` where `js` reaches a cluster (its server's INFO says so), whose
    streams elect leaders; a single server elects nothing, so there `call` is made once and a
    timeout (a grant missing, JetStream slow) is said at once, not after `ELECTION_BOUND_S`.
    What provisioning asks goes through here: `parley up --cluster 3` started again on its
    stores met streams still electing, and `parley provision` given credentials without a
    grant would otherwise wait 45 s for each request to say so."""
    if not clustered(js._nc._server_info):
        return await call()
    return await through_elections(call, what)
