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
of the process during that one attempt quarantined an innocent message. What another process
settled is not known here and still counts, so the bound on a poison message's deaths holds.

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

import logging
import time
from collections import OrderedDict

from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError
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
            if entry is not None and entry.value:
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
