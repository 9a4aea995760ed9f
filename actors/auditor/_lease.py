"""The writer's lease: one auditor replica appends, the others stand by.

The audit chain has a single writer (actors/auditor/_appender.py). Replicas of the auditor
share its durable consumers, so without a lease two of them would both append and each take
the other's records for foreign writes. The lease is one key (the auditor's id) in the
`leases` bucket, written only with compare-and-set:

- taking a free lease is a create-only put; taking an expired one is an update on the
  revision the standby watched go stale; renewing is an update on the holder's own revision.
  Whoever loses a race gets "wrong last sequence" and goes on standing by;
- liveness is judged on each replica's own monotonic clock, never by comparing clocks: a
  standby takes the lease once it has seen the same revision for `ttl_s` seconds; the holder
  renews every `ttl_s / 4` and counts itself the holder only until `3/4 ttl_s` after it *sent*
  its last successful renewal. Since the standby's wait begins after that renewal was
  stored, the holder always stops before any standby may start (both clocks tick at the
  same rate; a process paused by SIGSTOP finds its time ran out when it resumes);
- a holder that stops cleanly deletes the key (on its own revision), so a standby takes over
  at its next look instead of after `ttl_s`.

Elections. While the bucket's stream elects a leader its requests time out or are answered
`503`. A standby's look and take, and opening the bucket, are asked again through the
election (bus/_elections.py) instead of ending the process. A holder whose renewals fail so
past its time *lapses*: `held()` is false from the moment its time runs out, so it appends
nothing, exactly as if it had lost the lease, but it goes on renewing on its own revision.
Nobody else can have taken the lease meanwhile without changing that revision (every take
is a compare-and-set), so a renewal that then gets through proves the lease is still its
own, and it appends again from `3/4 ttl_s` after *that* renewal was sent, the same bound as
any renewal; a standby that watched the old revision go stale loses its compare-and-set
to it. A renewal refused with "wrong last sequence" is a takeover (`LeaseLost`), unless the
key still holds this replica's own token (an earlier renewal stored, its answer lost: renewed
on that revision next, its time not extended by it); so is a lapse longer than
`ELECTION_BOUND_S`: a cluster that stays without quorum still stops the holder, with a clear
error.

The bound: a standby holds the lease at most `ttl_s` plus one look (`ttl_s / 8`) after the
last renewal it saw, so within `1.4 * ttl_s` of the holder's death. Appends a paused holder had
already handed to its socket are refused by the chain itself (see the appender's docstring).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from nats.js import JetStreamContext
from nats.js.errors import KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from bus import ELECTION_BOUND_S, is_election_error, through_elections

__all__ = ("LeaseLost", "WriterLease", "stop_when_lost")

log = logging.getLogger("parley.actors.auditor")

_HOLD_FRACTION = 0.75
"""Of `ttl_s`, how long after sending its last successful renewal the holder still writes."""
_RENEW_FRACTION = 0.25
_LOOK_FRACTION = 0.125


class LeaseLost(RuntimeError):
    """This replica no longer holds the writer's lease: it must not append."""


class WriterLease:
    """The exclusive, renewed lease on one key of the `leases` bucket.

    Args:
        js: JetStream context (the bucket is provisioned with the streams).
        bucket: The lease bucket's name.
        key: What is leased (the auditor's actor id: one chain, one writer).
        ttl_s: How long a lease outlives its last renewal (the takeover bound's base).
    """

    def __init__(self, js: JetStreamContext, bucket: str, key: str, ttl_s: float) -> None:
        self._js = js
        self._bucket = bucket
        self._key = key
        self.ttl_s = ttl_s
        self.holder = uuid.uuid4().hex[:16]
        """This replica's token: the lease's value while it holds it, and its appends' epoch."""
        self.predecessor = ""
        """The token this replica took the lease over from ("" if the lease was free)."""
        self._kv: KeyValue | None = None
        self._revision = 0
        self._valid_until = 0.0
        self._lapsed_at: float | None = None
        """When this holder's time ran out with renewals failing as in an election."""

    async def open(self) -> None:
        self._kv = await through_elections(
            lambda: self._js.key_value(self._bucket), "the lease bucket"
        )

    def held(self) -> bool:
        """Whether this replica may append now (false once its time ran out, even unrenewed)."""
        return self._revision > 0 and time.monotonic() < self._valid_until

    def check(self) -> None:
        """Raise `LeaseLost` unless `held()`: called right before each append is sent."""
        if not self.held():
            raise LeaseLost("the writer's lease is not held (expired or taken over)")

    async def acquire_free(self) -> bool:
        """Take the lease if nobody holds it (True); False at once if someone does."""
        kv = self._require()
        sent = time.monotonic()
        try:
            await through_elections(lambda: kv.get(self._key), "the writer's lease")
        except (KeyNotFoundError, KeyDeletedError):
            return await self._take(sent, None)
        return False

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Stand by until this replica holds the lease (True) or `stop` is set (False)."""
        kv = self._require()
        seen: tuple[int, float] | None = None
        announced = False
        while not stop.is_set():
            sent = time.monotonic()
            try:
                entry = await through_elections(
                    lambda: kv.get(self._key), "the writer's lease", stop=stop
                )
            except (KeyNotFoundError, KeyDeletedError):
                self.predecessor = ""  # given back: nobody's lease is being cut short
                if await self._take(sent, None):
                    return True
                continue
            except Exception:
                if stop.is_set():  # asked to stop while the cluster was electing
                    return False
                raise
            revision = int(entry.revision or 0)
            if seen is None or seen[0] != revision:
                seen = (revision, time.monotonic())
                if not announced:
                    holder = (entry.value or b"").decode(errors="replace")
                    log.info("standing by: the writer's lease is held", extra={"holder": holder})
                    announced = True
            elif time.monotonic() - seen[1] >= self.ttl_s:  # even if looks failed meanwhile:
                # the holder's renewals failed as well, and a late one changes the revision
                self.predecessor = (entry.value or b"").decode(errors="replace")
                if await self._take(sent, revision):
                    return True
                seen = None
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.ttl_s * _LOOK_FRACTION)
            except TimeoutError:
                pass
        return False

    async def _take(self, sent: float, stale_revision: int | None) -> bool:
        """Take the lease by compare-and-set, asked again through an election.

        A take that was stored but whose answer was lost is refused when asked again ("wrong
        last sequence"): this replica then stands by, watching its own token go stale, and
        takes it over in turn. Never two holders, at worst one lease period lost.
        """
        kv = self._require()
        value = self.holder.encode()

        async def take() -> int:
            if stale_revision is None:
                return await kv.create(self._key, value)
            return await kv.update(self._key, value, last=stale_revision)

        try:
            revision = await through_elections(take, "taking the writer's lease")
        except KeyWrongLastSequenceError:
            return False  # another replica was quicker, or the holder renewed just now
        except KeyNotFoundError:
            # nats-py's create, refused, reads the key to tell a deleted one from a held one;
            # a replica still catching up after an election may not have it yet. Refused all
            # the same.
            return False
        self._revision, self._valid_until = revision, sent + self.ttl_s * _HOLD_FRACTION
        log.info(
            "took the writer's lease",
            extra={"holder": self.holder, "predecessor": self.predecessor or None},
        )
        return True

    async def renew(self) -> None:
        """Renew on this replica's own revision.

        Raises:
            LeaseLost: another replica holds it now, or this one's time ran out before a
                renewal got through.
        """
        kv = self._require()
        sent = time.monotonic()
        try:
            revision = await kv.update(self._key, self.holder.encode(), last=self._revision)
        except KeyWrongLastSequenceError:
            try:
                stored = await self._own_newer_revision()
            except Exception as exc:  # the renewal's outcome is unknown: failed, for now
                self._failed(exc)
                return
            if stored is None:
                self._revision = 0
                raise LeaseLost("the writer's lease was taken over") from None
            if stored <= self._revision:  # read from a replica not caught up yet: ask again
                self._failed(TimeoutError("the lease's newest revision is not readable yet"))
                return
            # An earlier renewal was stored but its answer lost (an election): the key is
            # still this replica's. Its time is not extended by it (when it was stored is
            # unknown); the next renewal, on its revision, extends it.
            log.info("a renewal stored unanswered: renewing on its revision")
            self._revision = stored
            return
        except Exception as exc:  # unreachable server: fine while the lease lasts
            self._failed(exc)
            return
        if self._revision:
            self._revision, self._valid_until = revision, sent + self.ttl_s * _HOLD_FRACTION
            if self._lapsed_at is not None:
                self._lapsed_at = None
                log.info("renewed the writer's lease after it lapsed: appending again")

    async def _own_newer_revision(self) -> int | None:
        """The key's revision if its value is still this replica's token, else None.

        Only this process writes its token (every other replica writes its own), so a newer
        revision holding it is one of this replica's own renewals, stored unanswered. A
        revision not newer than the one renewed on comes from a replica that has not caught
        up yet (reads are answered by any replica): the caller asks again.
        """
        kv = self._require()
        try:
            entry = await kv.get(self._key)
        except (KeyNotFoundError, KeyDeletedError):
            return None
        return int(entry.revision or 0) if entry.value == self.holder.encode() else None

    def _failed(self, exc: Exception) -> None:
        """A renewal failed: retried at the next tick while the lease lasts, else a lapse."""
        if not self.held():
            self._lapse(exc)
            return
        log.warning("lease renewal failed; retrying", extra={"error": repr(exc)})

    def _lapse(self, exc: Exception) -> None:
        """The holder's time ran out with its renewals failing: stop appending (already so:
        `held()` is false) and go on renewing while it is an election's error, for at most
        `ELECTION_BOUND_S` (module docstring).

        Raises:
            LeaseLost: any other error, or the lapse lasted too long.
        """
        now = time.monotonic()
        if self._lapsed_at is None and is_election_error(exc):
            self._lapsed_at = now
            log.warning(
                "the writer's lease lapsed while the cluster was unavailable: not appending,"
                " renewing on its own revision",
                extra={"error": repr(exc)},
            )
            return
        if self._lapsed_at is not None and is_election_error(exc):
            if now - self._lapsed_at <= ELECTION_BOUND_S:
                return
        self._revision = 0
        raise LeaseLost(f"could not renew the writer's lease in time: {exc!r}") from exc

    async def keep(self, stop: asyncio.Event) -> None:
        """Renew every `ttl_s / 4` until `stop` is set; raise `LeaseLost` when it is lost."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.ttl_s * _RENEW_FRACTION)
            except TimeoutError:
                await self.renew()

    async def release(self) -> None:
        """Give the lease up (on this replica's revision) so a standby takes it at once."""
        if not self._revision:
            return
        revision, self._revision = self._revision, 0
        try:
            await self._require().delete(self._key, last=revision)
        except Exception as exc:  # it expires anyway
            log.warning("could not release the writer's lease", extra={"error": repr(exc)})

    def _require(self) -> KeyValue:
        if self._kv is None:
            raise RuntimeError("WriterLease used before open()")
        return self._kv


async def stop_when_lost(keeper: asyncio.Task[None], stopping: asyncio.Event) -> None:
    """Stop the actor if the lease's keeper ends (`LeaseLost`) before `stopping` is set.

    A stop, not a crash here: the handlers in hand finish (their appends are refused at
    once) and settle, so none leaves a quarantine mark that would have its next delivery
    taken for a poison message; `stop()` then raises, and the process exits non-zero.
    """
    stop_wait = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({keeper, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop_wait.cancel()
    if keeper.done() and not stopping.is_set():
        error = keeper.exception()
        log.error("lost the writer's lease: stopping", extra={"error": repr(error)})
        stopping.set()
