"""Quarantine: an input that killed its handler's process is not handed to the next replica.

JetStream redelivers a message whose process died while handling it, to whichever replica
asks next. A message that kills the process (a bug, a library that aborts, memory blown up by
it) then takes every replica down in turn, for `max_deliver` times the ack wait, with no traffic
through meanwhile.

A first delivery cannot be told apart from the others cheaply: marking every message before
handling it would cost a KV round per envelope on the hot path, and a replica killed by an
operator or a failing host would make every message it held look guilty. Nor can the first
redelivery: one crash redelivers every message the process held, and handling each of those
alone under a mark (three fsynced writes apiece) turned the recovery from a routine kill into
seconds of serial work that held up everyone sharing the server. So the guard starts at the
delivery `GUARDED_FROM` (the second redelivery): before handling such a message, the runtime
writes `handling.<actor>.<stream>.<seq>` = its delivery number to the `handling` bucket,
handles it alone (never in a batch, so a death names one message), and deletes the mark once
the attempt settled, before acking or nacking it. A later delivery that finds a mark from an
earlier delivery knows that attempt never settled: the process died (or hung past
`max_handler_s`) while handling it, and the message is dead-lettered as `quarantined` instead
of handled. A poison message now costs three process deaths instead of `max_deliver` (two
unmarked, the third alone under its mark); an innocent message caught in one crash is handled
in its batch on its redelivery, as fast as before.

Only deliveries that may have died count toward `GUARDED_FROM`: a delivery this very process
settled without acking (its handler raised and it was nacked, or the handler deferred it) is
no death, so it is subtracted (`Settled`). Otherwise two clean failures during a cluster
election (a KV read timing out) put the third delivery under the mark, and an operator's kill
of the process during that one attempt quarantined an innocent message. A process that stops
cleanly hands its record to the next process of its actor (`hand_over`, `recall`): each entry
is written under the message's own mark key as `settled:<count>`, read when that message first
comes back to a process that has no record of it. Without that, every reminder a router had
deferred (nacked with a delay, again and again) came back to the next `parley up` as a
possible death, with an error line each. What a process that died settled is not known and
still counts, so the bound on a poison message's deaths holds: a record only ever says how many
earlier deliveries did settle, which no death can make untrue.

The bound is the setting `poison_deaths` (`GUARDED_FROM`, 3, by default): a poison message
costs at most that many process deaths, as long as it is below `max_deliver` (past it,
JetStream gives up first). Each delivery after a possible death is alerted naming the message
(`alert_possible_death`), and the quarantine itself (an error log naming the stream sequence,
a `quarantined` dead letter and its audit record); docs/quotas.md says what an operator sees.
An agent's marks are in its own bucket (`Settings.marks_bucket`), the others' in `handling`.

The guard fails open: when the bucket cannot be read or written the message is handled
unguarded (and the failure logged), as before this existed, and the guard rests for a minute
so a missing bucket or grant does not cost every redelivery a timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from bus._context import Context
from schemas import Namespace

__all__ = ("GUARDED_FROM", "Quarantine", "Settled", "alert_possible_death", "handling_key")

log = logging.getLogger("parley.bus.quarantine")

BUCKET = "handling"
"""The marks' own bucket, apart from the gate's id claims: its quota (docs/quotas.md) is all a
principal filling its own marks can use up, and a full bucket only rests the guard."""
GUARDED_FROM = 3
"""The first delivery handled alone under a mark by default (see the module docstring): a
poison message costs at most this many process deaths (setting `poison_deaths`)."""
_REST_S = 60.0
_SETTLED = b"settled:"
"""How a handed-over record's value starts, apart from a mark's delivery number."""
HANDED_OVER = 1024
"""The most recent entries a process that stops cleanly hands over (one small write each)."""
_HAND_OVER_S = 5.0


class Settled:
    """How many deliveries of each recent message this process settled without acking.

    Bounded: the oldest entries go first, and an entry forgotten only makes a later
    redelivery count one more possible death, as if this record did not exist."""

    def __init__(self, limit: int = 4096, guarded_from: int = GUARDED_FROM) -> None:
        self._counts: OrderedDict[tuple[str, int], int] = OrderedDict()
        self._limit = limit
        self._guarded_from = guarded_from

    def add(self, stream: str, seq: int) -> None:
        """A delivery of `seq` ended here in a nak (a clean failure or a deferral)."""
        key = (stream, seq)
        self._counts[key] = self._counts.pop(key, 0) + 1
        if len(self._counts) > self._limit:
            self._counts.popitem(last=False)

    def absorb(self, stream: str, seq: int, count: int) -> None:
        """What an earlier process of this actor settled of `seq`: a count of deliveries since
        the message was first sent, so the larger of it and this process's own is true."""
        key = (stream, seq)
        self._counts[key] = max(self._counts.pop(key, 0), count)
        if len(self._counts) > self._limit:
            self._counts.popitem(last=False)

    def forget(self, stream: str, seq: int) -> None:
        """`seq` was acked: it never comes back, so nothing of it is handed over."""
        self._counts.pop((stream, seq), None)

    def knows(self, stream: str, seq: int) -> bool:
        return (stream, seq) in self._counts

    def recent(self, most: int) -> list[tuple[str, int, int]]:
        """Up to `most` entries, (stream, seq, count), the most recently settled last."""
        return [(stream, seq, n) for (stream, seq), n in list(self._counts.items())[-most:]]

    def unexplained(self, stream: str, seq: int, attempt: int) -> int:
        """How many deliveries of `seq` before `attempt` this process did not see settle:
        each may have died with the process that held it."""
        return max(0, attempt - 1 - self._counts.get((stream, seq), 0))

    def guarded(self, stream: str, seq: int, attempt: int) -> bool:
        """Whether delivery `attempt` of `seq` is handled alone under the mark: the earlier
        deliveries this process did not see settle (those that may have died) reach
        `guarded_from - 1`."""
        return self.unexplained(stream, seq, attempt) >= self._guarded_from - 1


def alert_possible_death(ctx: Context, deaths: int, poison_deaths: int) -> None:
    """Say which message came back unsettled: the process that held it may have died of it,
    and `poison_deaths` of those quarantine it (an operator should hear of the first)."""
    log.error(
        "a message came back whose earlier delivery never settled: the process handling it "
        "may have died of it",
        extra={
            "stream": ctx.stream,
            "seq": ctx.stream_seq,
            "subject": ctx.subject,
            "envelope_id": ctx.envelope_id,
            "attempt": ctx.attempt,
            "possible_deaths": deaths,
            "poison_deaths": poison_deaths,
        },
    )


def handling_key(actor_id: str, stream: str, seq: int) -> str:
    """The mark of `actor_id` handling message `seq` of `stream` (broker permissions grant
    each actor `handling.<itself>.>` only)."""
    return f"handling.{actor_id}.{stream}.{seq}"


class Quarantine:
    """Marks redelivered inputs while they are handled; tells which ones killed a handler."""

    def __init__(
        self, js: JetStreamContext, ns: Namespace, actor_id: str, bucket: str | None = None
    ) -> None:
        """`bucket`: the marks' bucket (an agent's own, `Settings.marks_bucket`); by default
        the shared `handling` bucket."""
        self._js = js
        self._bucket = bucket or ns.bucket(BUCKET)
        self._actor_id = actor_id
        self._kv: KeyValue | None = None
        self._resting_until = 0.0

    async def _open(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self._js.key_value(self._bucket)
        return self._kv

    async def begin(self, stream: str, seq: int, attempt: int) -> int | None:
        """Before handling delivery `attempt` (> 1) of `seq`: the earlier delivery that died
        while handling it (quarantine it), or None after marking this one as in hand."""
        if time.monotonic() < self._resting_until:
            return None
        key = handling_key(self._actor_id, stream, seq)
        try:
            kv = await self._open()
            try:
                entry = await kv.get(key)
            except KeyNotFoundError:
                entry = None
            if entry is not None and entry.value and not entry.value.startswith(_SETTLED):
                died = int(entry.value)
                if died < attempt:
                    return died
            await kv.put(key, str(attempt).encode())
        except Exception as exc:  # fail open: handle it unguarded
            self._resting_until = time.monotonic() + _REST_S
            log.warning(
                "could not mark a redelivered message", extra={"error": repr(exc), "seq": seq}
            )
        return None

    async def end(self, stream: str, seq: int) -> None:
        """The attempt settled (handled, failed or dead-lettered): drop its mark."""
        if time.monotonic() < self._resting_until:
            return
        try:
            kv = await self._open()
            await kv.delete(handling_key(self._actor_id, stream, seq))
        except Exception as exc:  # a stale mark quarantines only a redelivery of this seq
            log.warning("could not clear a handling mark", extra={"error": repr(exc), "seq": seq})

    async def hand_over(self, settled: Settled) -> None:
        """On a clean stop: write what this process settled for the next process of its actor
        to read, each under its message's mark key (bounded in time; lost, it only costs the
        alerts this exists to spare)."""
        entries = [entry for entry in settled.recent(HANDED_OVER) if entry[2] > 0]
        if not entries or time.monotonic() < self._resting_until:
            return
        try:
            kv = await self._open()
            async with asyncio.timeout(_HAND_OVER_S):
                await asyncio.gather(
                    *(self._hand_over_one(kv, stream, seq, n) for stream, seq, n in entries)
                )
        except Exception as exc:
            log.warning("could not hand over the settled deliveries", extra={"error": repr(exc)})
            return
        log.info("handed over the settled deliveries", extra={"entries": len(entries)})

    async def _hand_over_one(self, kv: KeyValue, stream: str, seq: int, count: int) -> None:
        """Write one count where no mark is: a replica of the same actor may be handling the
        message under its mark right now, and a mark overwritten would hide its death."""
        key, value = handling_key(self._actor_id, stream, seq), _SETTLED + b"%d" % count
        try:
            await kv.create(key, value)
            return
        except KeyWrongLastSequenceError:
            pass
        try:
            entry = await kv.get(key)
            if entry.value is not None and entry.value.startswith(_SETTLED):
                await kv.update(key, value, last=entry.revision)  # a mark made meanwhile wins
        except (KeyNotFoundError, KeyWrongLastSequenceError):
            pass  # the key moved under us: a mark, or another replica's record, stands

    async def recall(self, settled: Settled, stream: str, messages: Sequence[Msg]) -> None:
        """Before judging a batch: read the handed-over record of each redelivered message
        this process has no record of (once per message: after it, this process has one)."""
        unknown = [
            msg.metadata.sequence.stream
            for msg in messages
            if msg.metadata.num_delivered > 1
            and not settled.knows(stream, msg.metadata.sequence.stream)
        ]
        if not unknown or time.monotonic() < self._resting_until:
            return
        try:
            kv = await self._open()
            counts = await asyncio.gather(*(self._settled_count(kv, stream, s) for s in unknown))
        except Exception as exc:  # fail open: counted as possible deaths, as before
            self._resting_until = time.monotonic() + _REST_S
            log.warning("could not read settled deliveries", extra={"error": repr(exc)})
            return
        for seq, count in zip(unknown, counts, strict=True):
            settled.absorb(stream, seq, count)

    async def _settled_count(self, kv: KeyValue, stream: str, seq: int) -> int:
        try:
            entry = await kv.get(handling_key(self._actor_id, stream, seq))
        except KeyNotFoundError:
            return 0
        value = entry.value or b""
        return int(value[len(_SETTLED) :]) if value.startswith(_SETTLED) else 0
