"""Sessions in the `sessions` KV bucket, written with compare-and-set.

A session's state is one key, `session.<id>` (an orchestrated session's `orch.<id>`: one
store per kind of session), whose revision is the compare-and-set token:
an update names the revision it read, so two router replicas (or a paused "zombie" replica and
its successor) can never both advance the same session from the same state; the loser reads
again. A second key, `trace.<trace id>`, names the session a trace belongs to, so an error
envelope (which names only the call it answers) finds its session.

States read from this process's cache may be stale when other replicas run; callers that act
on a cached state's *absence* of something (ignoring an input) re-read it first.

Retention (bus/_retention.py): a session's write once it has ended carries a per-message TTL
(the settings' `retention.ended_sessions_s`) and rolls up the key's older revisions, so the
key vanishes whole that long after the end, never reverting to an older, open revision; so
does its trace's link. Every write of an open session has no TTL: an open session never
expires. A session written again after its end (an input recorded then) keeps the expiry its
end set (`ended_at_ms`): no input, a stranger's refused Stop included, keeps it longer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Final, Generic, Protocol, TypeVar, cast

import msgspec
from nats.js.errors import APIError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from actors.router._session_charges import Charged, SessionCharges
from bus import Outbox
from schemas import encode

__all__ = ("Conflict", "SessionStore", "Stored")

log = logging.getLogger("parley.actors.router")

_CACHE_SIZE: Final = 4096
_EXPECTED_LAST_SUBJECT_SEQ: Final = "Nats-Expected-Last-Subject-Sequence"
_MSG_TTL: Final = "Nats-TTL"
_ROLLUP: Final = {"Nats-Rollup": "sub"}
"""Replaces every older revision of the key: an ended session's TTL then removes it whole."""
_WRONG_LAST_SEQUENCE: Final = (10071, 10164)


class _Stored(Charged, Protocol):
    @property
    def session_id(self) -> str: ...


S = TypeVar("S", bound=_Stored)


def _retrieved(future: asyncio.Future[str | None]) -> None:
    """Take a read's outcome even when nobody awaits it (its session's write failed), so
    asyncio does not report its failure as never retrieved."""
    if not future.cancelled():
        future.exception()


class Conflict(Exception):
    """Someone else wrote the session since we read it: read again and redo the transition."""


class Stored(msgspec.Struct, Generic[S], frozen=True):
    session: S
    revision: int
    fresh: bool
    """Read from the bucket just now (False: from this process's cache)."""


class SessionStore(Generic[S]):
    """Reads and compare-and-set writes of sessions, with a small cache of what we wrote."""

    def __init__(
        self,
        kv: KeyValue,
        kind: type[S],
        prefix: str,
        *,
        ended_ttl_s: int,
        charges: SessionCharges | None = None,
    ) -> None:
        """`charges`: what each write adds to its opener's share (None: nothing is counted)."""
        self._kv = kv
        self.charges = charges
        self._ended_ttl_s = ended_ttl_s
        self._decoder = msgspec.json.Decoder(kind)
        self._prefix = prefix
        self._cache: OrderedDict[str, Stored[S]] = OrderedDict()

    def _key(self, session_id: str) -> str:
        return f"{self._prefix}.{session_id}"

    async def load(self, session_id: str, *, fresh: bool = False) -> Stored[S] | None:
        """The session and its revision, or None if there is no such session."""
        if not fresh and (cached := self._cache.get(session_id)) is not None:
            self._cache.move_to_end(session_id)
            return cached
        try:
            entry = await self._kv.get(self._key(session_id))
        except KeyNotFoundError:  # also a deleted key (KeyDeletedError is a subclass)
            self._cache.pop(session_id, None)
            return None
        if entry.value is None or entry.revision is None:
            return None
        session, revision = self._decoder.decode(entry.value), int(entry.revision)
        # Fresh for this caller only: a later reader of the cache gets it as possibly stale,
        # or it would trust an old state (and ignore an answer) without reading again.
        self._remember(Stored(session, revision, False))
        return Stored(session, revision, True)

    async def create(self, session: S) -> None:
        """Store a new session; `Conflict` if the id is already taken."""
        session, value, grown = self._stamped(session, encode(session))
        try:
            revision = await self._kv.create(self._key(session.session_id), value)
        except KeyWrongLastSequenceError:
            raise Conflict(session.session_id) from None
        self._remember(Stored(session, int(revision), False))
        self._charge(session, grown)

    def _stamped(self, session: S, value: bytes) -> tuple[S, bytes, int]:
        if self.charges is None:
            return session, value, 0
        return self.charges.stamped(session, value)

    def _charge(self, session: S, grown: int) -> None:
        """Charge a written session's growth beside what follows, not before it: the count
        needs two round trips, which no opening or turn waits for (a charge that cannot be
        made is logged and lost, actors/router/_session_charges.py)."""
        if grown and self.charges is not None:
            self.charges.add(session.opener, grown)

    async def update(
        self, session: S, revision: int, *, trace_id: str = "", outbox: Outbox | None = None
    ) -> None:
        """Replace the session read at `revision`; `Conflict` if it changed since.

        An ended session is written to expire (module docstring), and so is the link from
        `trace_id` when it names this session: an input of another trace (a person's Stop)
        never touches a link it does not own. Which session the link names is read while the
        session is written, not after: the write does not change it. Given the input's
        `outbox`, the link's write goes out with the effects that follow and is stored before
        the input is acked, as they are, instead of before them: a session's end waits two
        round trips less before its effects go out.
        """
        now_ms = int(time.time() * 1000)
        if not session.open and not session.ended_at_ms:  # this write ends it
            ended = msgspec.structs.replace(cast(msgspec.Struct, session), ended_at_ms=now_ms)
            session = cast(S, ended)
        session, value, grown = self._stamped(session, encode(session))
        key = self._key(session.session_id)
        ttl_s = self._left_s(session, now_ms)
        linked: asyncio.Future[str | None] | None = None
        if not session.open and trace_id and trace_id.isascii():
            linked = asyncio.ensure_future(self.session_of_trace(trace_id))
            linked.add_done_callback(_retrieved)
        try:
            if session.open:
                new = await self._kv.update(key, value, last=revision)
            else:
                new = await self._expiring(key, value, revision, ttl_s)
        except BaseException as exc:
            if linked is not None:
                linked.cancel()  # the session was not written: its link stays as it is
            if isinstance(exc, KeyWrongLastSequenceError):
                self._cache.pop(session.session_id, None)
                raise Conflict(session.session_id) from None
            raise
        self._remember(Stored(session, int(new), False))
        self._charge(session, grown)
        if linked is not None and await linked == session.session_id:
            link, owner = f"trace.{trace_id}", session.session_id.encode()
            if outbox is None:
                await self._expiring(link, owner, None, ttl_s)
            else:
                headers = self._expiring_headers(None, ttl_s)
                await outbox.publish(f"{self._kv._pre}{link}", owner, headers)

    async def expire_link(self, trace_id: str, session: S, outbox: Outbox) -> None:
        """Write `trace_id`'s link to expire with its ended `session`, if it names that
        session: for a replayed input of an ended session, whose first attempt may have stored
        the session's end and lost the link's rewrite (it goes out with the effects), which
        would then never expire. It expires when the session does, not a retention later."""
        session_id = session.session_id
        if trace_id and trace_id.isascii() and await self.session_of_trace(trace_id) == session_id:
            link = f"{self._kv._pre}trace.{trace_id}"
            ttl_s = self._left_s(session, int(time.time() * 1000))
            await outbox.publish(link, session_id.encode(), self._expiring_headers(None, ttl_s))

    def _left_s(self, session: S, now_ms: int) -> int:
        """What is left of an ended session's retention, counted from its end (whole seconds,
        at least one): written again later (an input recorded after the end), it keeps the
        expiry its end set, so nobody's input keeps a session, and what it holds, for longer."""
        if session.open:
            return self._ended_ttl_s
        elapsed_s = max(0, now_ms - session.ended_at_ms) // 1000
        return max(1, int(self._ended_ttl_s) - elapsed_s)

    def _expiring_headers(self, revision: int | None, ttl_s: int | None = None) -> dict[str, str]:
        headers = dict(_ROLLUP)
        if revision is not None:
            headers[_EXPECTED_LAST_SUBJECT_SEQ] = str(revision)
        ttl = self._ended_ttl_s if ttl_s is None else ttl_s
        headers[_MSG_TTL] = str(int(ttl))  # whole seconds, as nats-py's
        return headers

    async def _expiring(
        self, key: str, value: bytes, revision: int | None, ttl_s: int | None = None
    ) -> int:
        """Write `key` to expire in `ttl_s` (the ended sessions' TTL unless given), rolling up
        its older revisions; with compare-and-set on `revision` unless None. nats-py's KV
        offers no rollup, so this is its own publish on the key's subject (the bucket's
        `_pre`, which honours a JetStream domain or API prefix as the bucket's other writes
        do)."""
        headers = self._expiring_headers(revision, ttl_s)
        try:
            ack = await self._kv._js.publish(f"{self._kv._pre}{key}", value, headers=headers)
        except APIError as exc:
            if exc.err_code in _WRONG_LAST_SEQUENCE:
                raise KeyWrongLastSequenceError(description=exc.description) from None
            raise
        return ack.seq

    async def link_trace(self, trace_id: str, session_id: str) -> None:
        """Record that `trace_id` belongs to `session_id` (idempotent)."""
        await self._kv.put(f"trace.{trace_id}", session_id.encode())

    async def create_linked(self, session: S, trace_id: str) -> bool:
        """Create `session` and link `trace_id` to it (an error in the trace finds its session
        through the link) in one round trip, not two in a row; False if the session id was
        taken.

        The link is created create-only: a trace already linked keeps its session (this
        input's earlier attempt linked it the same; another session's link is never pointed
        at this one, which a duplicate opening would otherwise do). Whichever write fails,
        the input is retried, and a retry that finds the session stored links the trace again
        before replaying its effects.
        """
        linked, created = await asyncio.gather(
            self._kv.create(f"trace.{trace_id}", session.session_id.encode()),
            self.create(session),
            return_exceptions=True,
        )
        if isinstance(created, Conflict):
            return False
        if isinstance(created, BaseException):
            raise created
        if isinstance(linked, KeyWrongLastSequenceError):
            linked_to = await self.session_of_trace(trace_id)
            if linked_to != session.session_id:
                log.warning(
                    "a session opened in a trace linked to another session keeps that link",
                    extra={"session_id": session.session_id, "linked_to": linked_to},
                )
        elif isinstance(linked, BaseException):
            raise linked
        return True

    async def session_of_trace(self, trace_id: str) -> str | None:
        try:
            entry = await self._kv.get(f"trace.{trace_id}")
        except KeyNotFoundError:
            return None
        return entry.value.decode() if entry.value else None

    def _remember(self, stored: Stored[S]) -> None:
        session_id = stored.session.session_id
        self._cache[session_id] = stored
        self._cache.move_to_end(session_id)
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
