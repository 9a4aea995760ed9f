"""Sessions in the `sessions` KV bucket, written with compare-and-set.

A session's state is one key, `session.<id>` (an orchestrated session's `orch.<id>`: one
store per kind of session), whose revision is the compare-and-set token:
an update names the revision it read, so two router replicas (or a paused "zombie" replica and
its successor) can never both advance the same session from the same state; the loser reads
again. A second key, `trace.<trace id>`, names the session a trace belongs to, so an error
envelope (which names only the call it answers) finds its session.

States read from this process's cache may be stale when other replicas run; callers that act
on a cached state's *absence* of something (ignoring an input) re-read it first.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Final, Generic, Protocol, TypeVar

import msgspec
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from schemas import encode

__all__ = ("Conflict", "SessionStore", "Stored")

_CACHE_SIZE: Final = 4096


class _Stored(Protocol):
    @property
    def session_id(self) -> str: ...


S = TypeVar("S", bound=_Stored)


class Conflict(Exception):
    """Someone else wrote the session since we read it: read again and redo the transition."""


class Stored(msgspec.Struct, Generic[S], frozen=True):
    session: S
    revision: int
    fresh: bool
    """Read from the bucket just now (False: from this process's cache)."""


class SessionStore(Generic[S]):
    """Reads and compare-and-set writes of sessions, with a small cache of what we wrote."""

    def __init__(self, kv: KeyValue, kind: type[S], prefix: str) -> None:
        self._kv = kv
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
        try:
            revision = await self._kv.create(self._key(session.session_id), encode(session))
        except KeyWrongLastSequenceError:
            raise Conflict(session.session_id) from None
        self._remember(Stored(session, int(revision), False))

    async def update(self, session: S, revision: int) -> None:
        """Replace the session read at `revision`; `Conflict` if it changed since."""
        try:
            new = await self._kv.update(
                self._key(session.session_id), encode(session), last=revision
            )
        except KeyWrongLastSequenceError:
            self._cache.pop(session.session_id, None)
            raise Conflict(session.session_id) from None
        self._remember(Stored(session, int(new), False))

    async def link_trace(self, trace_id: str, session_id: str) -> None:
        """Record that `trace_id` belongs to `session_id` (idempotent)."""
        await self._kv.put(f"trace.{trace_id}", session_id.encode())

    async def create_linked(self, session: S, trace_id: str) -> bool:
        """Create `session` and link `trace_id` to it (an error in the trace finds its session
        through the link) in one round trip, not two in a row; False if the session id was
        taken meanwhile. Whichever write fails, the input is retried, and a retry that finds
        the session stored links the trace again before replaying its effects.
        """
        linked, created = await asyncio.gather(
            self.link_trace(trace_id, session.session_id),
            self.create(session),
            return_exceptions=True,
        )
        if isinstance(linked, BaseException):
            raise linked
        if isinstance(created, Conflict):
            return False
        if isinstance(created, BaseException):
            raise created
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
