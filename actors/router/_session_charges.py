"""Each person's share of the sessions bucket: what their sessions hold, charged as it grows.

The router alone writes the `sessions` bucket, for every person: the broker bounds it whole
(128 MiB by default), not per person. A session keeps its goal and its transcript, open for
as long as it runs and ended for `retention.ended_sessions_s` (30 days), so one person opening
sessions at their rate limit filled it for everyone (a storage review: 200 KB goals, five
sessions to 4 MiB, the default bucket in about three minutes), and then nobody's session could
open or end.

So each session's stored size is charged to the principal that opened it, within its share
(the quotas' `session_bytes_per_person`, bus/_shares.py with `SESSION_TERMS`). What is charged
is kept in the session itself (`charged_bytes`), rounded up to whole `STEP`s: a write that
grows the session past what was charged charges the difference, once, so a session is charged
its largest size (a revision rewrites the whole state, and an ended session's revisions roll
up into one, so that is what it holds for its retention), and most turns charge nothing. A
new session is refused `RATE_LIMITED` while its opener's share is used up, naming it and when
its oldest bytes expire; a session already open goes on (its growth is charged past the share:
what ran is kept), so one person can pass their share by what their open sessions grow. The
router checks the count its last charge for that person returned (`SessionCharges.refusal`),
so an opening waits for no read; with several router replicas, each learns of the others'
charges at its own next charge for that person, and a person can pass their share by what
the others took since.

A charge is made once the session is written, beside what follows: one that cannot be (the
broker gone a moment, the router killed in between) is logged and lost, and the count says
less than is stored until its window expires (docs/quotas.md). A charge counts for
`retention.ended_sessions_s` from its write, and a session is kept that long from its end
(`ended_at_ms`, however often it is written after), so one that ends more than a window of the
shares after its last charge is charged whole once more by the write that ends it
(`charged_at_ms`); within that window the count says less than it holds, and so it does while
a session stays open, unchanged, longer than the retention (its charges expire before it
ends).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final, Protocol, TypeVar, cast

import msgspec
from nats.js.kv import KeyValue

from bus import SESSION_TERMS, SHARE_WINDOWS, Payer, Settings, ShareExceeded, Shares
from schemas import encode

__all__ = ("STEP", "Charged", "SessionCharges", "session_charges")

log = logging.getLogger("parley.actors.router")

STEP: Final = 1024
"""Bytes a session is charged in: a turn rarely crosses a step, so rarely writes a charge."""
_OPENERS_KNOWN: Final = 10_000
"""Openers whose counts are remembered; the least recent is read afresh when it opens."""
_DIGITS: Final = 16
"""Room for `charged_bytes`' own digits, which the encoding that was measured may lack."""


class Charged(Protocol):
    """What a stored session tells of its charge: both kinds of session have it."""

    @property
    def opener(self) -> str: ...

    @property
    def charged_bytes(self) -> int: ...

    @property
    def charged_at_ms(self) -> int: ...

    @property
    def ended_at_ms(self) -> int: ...

    @property
    def open(self) -> bool: ...


C = TypeVar("C", bound=Charged)


class SessionCharges:
    """Charges what sessions hold to their openers' shares."""

    def __init__(
        self,
        shares: Shares,
        limit: int,
        renew_after_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`renew_after_s`: how long after its last charge an ended session's write is
        charged anew, whole (the shares' window: a charge is counted that much past the
        retention anyway)."""
        self._shares = shares
        self._limit = limit
        self._renew_ms = int(renew_after_s * 1000)
        self._clock = clock
        self._known: OrderedDict[str, int] = OrderedDict()
        """Each opener's count as this router last charged it."""
        self._pending: dict[str, int] = {}
        """Bytes written and not charged yet, by opener."""
        self._flushing: dict[str, asyncio.Future[None]] = {}
        """The charging under way, by opener: one at a time."""

    async def refusal(self, opener: str) -> str | None:
        """Why `opener` may open no session now (its share is used up), or None.

        An opening waits for no read while the opener's count, as this router last wrote it
        (every charge returns it, other replicas' charges included), leaves room: reading it
        first cost every opening a round trip before its create. An opener this router has not
        charged yet is let open, and the charge of that opening tells its count; one whose
        count is used up is read again, fresh (room comes back as its bytes expire).
        """
        known = self._known.get(opener)
        if known is None or known < self._limit:
            return None
        try:
            await self._shares.check_room([Payer("person", opener)])
        except ShareExceeded as exc:
            return str(exc)
        self._known.pop(opener, None)  # room came back: told again by its next charge
        return None

    def _remember(self, opener: str, used: int) -> None:
        self._known[opener] = used
        self._known.move_to_end(opener)
        while len(self._known) > _OPENERS_KNOWN:
            self._known.popitem(last=False)

    def stamped(self, session: C, value: bytes) -> tuple[C, bytes, int]:
        """`session` (encoded as `value`) with what it is charged now, its encoding, and the
        bytes to charge for it (0: what was charged covers it)."""
        if not session.opener:  # a session stored before openers were recorded
            return session, value, 0
        needed = -(-(len(value) + _DIGITS) // STEP) * STEP
        now_ms = int(self._clock() * 1000)
        # Ended long after its last charge, it is kept a retention from the end, past what
        # those charges count for: charged whole once more, by the write that ends it (its
        # later writes keep the expiry the end set).
        renewed = not session.open and session.ended_at_ms - session.charged_at_ms >= self._renew_ms
        grown = needed if renewed else needed - session.charged_bytes
        if grown <= 0:
            return session, value, 0
        struct = msgspec.structs.replace(
            cast(msgspec.Struct, session),
            charged_bytes=max(needed, session.charged_bytes),
            charged_at_ms=now_ms,
        )
        return cast(C, struct), encode(struct), grown

    def add(self, opener: str, grown: int) -> None:
        """Count `grown` more bytes of a written session against its opener's share, beside
        what follows the write: one charge at a time per opener, what grows meanwhile added
        up into the next. A person's sessions all charge one count, and a hundred of them
        charging it at once conflicted on its compare-and-set and retried: `parley bench
        --only collab` at 100 sessions lost a quarter of its rounds a second."""
        self._pending[opener] = self._pending.get(opener, 0) + grown
        if opener not in self._flushing:
            self._flushing[opener] = asyncio.ensure_future(self._flush(opener))

    async def _flush(self, opener: str) -> None:
        try:
            while (grown := self._pending.pop(opener, 0)) > 0:
                await self.charge(opener, grown)
        finally:  # no await between the last look and this: nothing added is left behind
            self._flushing.pop(opener, None)

    async def charge(self, opener: str, grown: int) -> None:
        """Count `grown` more bytes of a written session against its opener's share now."""
        payer = Payer("person", opener)
        try:
            totals = await self._shares.charge_anyway([payer], grown)
        except Exception as exc:  # the session is written; only the count falls behind
            log.warning(
                "could not charge a session's bytes to its opener's share",
                extra={"opener": opener, "bytes": grown, "error": repr(exc)},
            )
            return
        self._remember(opener, totals[payer])


def session_charges(kv: KeyValue, settings: Settings) -> SessionCharges:
    """Charges kept in the sessions bucket `kv` itself (`shares.person.<name>`), each person's
    share the quotas' `session_bytes_per_person`, counted for `retention.ended_sessions_s`."""
    quotas = settings.quotas
    shares = Shares(
        kv,
        per_person=quotas.session_share(),
        per_agent=quotas.bucket_max_bytes("sessions"),  # sessions are charged to persons only
        retention_s=settings.retention.ended_sessions_s,
        terms=SESSION_TERMS,
    )
    window_s = max(1.0, settings.retention.ended_sessions_s / SHARE_WINDOWS)
    return SessionCharges(shares, quotas.session_share(), renew_after_s=window_s)
