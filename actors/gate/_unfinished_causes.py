"""A cause the gate delivered but has not finished recording: its effect waits, not refused.

The gate publishes an admitted envelope's position, delivery and decision together, in one
round, and acks the submission only once all are stored. They go to different streams, so
when one of them is electing a leader (a cluster node lost) the delivery can be stored while
the position is refused: the submission is retried, and meanwhile its receiver already acts
on the delivery. Its next envelope names a cause whose position the gate does not hold yet,
which the gate's rule reads as a forged `Parley-Causation-Id` (`unknown_cause`): seen in a
cluster chaos run as a router's call refused as `FORGED_HEADER`, the session left waiting
for its turn's deadline.

So before refusing an unknown cause, the gate asks whether it is still deciding that cause:
the cause's id is claimed (the gate took it in, actors/gate/_ids.py) by a submission that is
still on PARLEY_SUBMIT, a work queue the gate acks only once every effect is stored. Then the
envelope is decided later (a deferral, not a failure), once the cause's retry recorded its
position. A cause recorded between the two reads is decided again at once with its record.
Anything else is refused as before: a cause never claimed, one whose submission is gone
(decided: refused, or admitted and its position since expired), one the sender submitted
itself, and one submitted after the envelope naming it (no envelope can react to a delivery
of something not yet submitted: an envelope naming itself, or two naming each other, are
refused at once instead of held).

What a deferral costs is bounded. It waits one step behind the cause's own retries
(bus/_failures.py's backoff), so the cause is tried again before each look; it stops two
deliveries short of `max_deliver`, so the envelope keeps a retry of its own for a failure
when it is decided; and the reads (the claim from the bucket's leader, then the submission)
are made only for an envelope refused as `unknown_cause`, for every such envelope of a batch
at once. The gate's own errors are claimed with the submission they answer, so an envelope
naming an error whose position was refused waits for that submission's retry the same way
(the router retries a call the gate refused as retryable under the error's id); only the
error about a submission dead-lettered before it was decoded carries none, and is refused.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from actors.gate._ids import Claim, claim_of_bytes
from actors.gate._plan import Deny
from actors.gate._records import id_key, position_key
from actors.gate._store import GateStore
from actors.gate._verdicts import Verdict
from bus import Context

__all__ = ("UnfinishedCauses",)

log = logging.getLogger("parley.actors.gate")

_KEPT_FOR_A_RETRY = 2
"""Deliveries short of `max_deliver` at which deferring stops: the one deciding the envelope,
and one more for a failure of that attempt (a counter conflict, an effect refused)."""


class UnfinishedCauses:
    """Tells an envelope whose cause the gate is still deciding, and how long it waits."""

    def __init__(self, backoff_s: Sequence[float], max_deliver: int) -> None:
        self._backoff_s = tuple(backoff_s)  # the settings hold one step at least
        self._max_deliver = max_deliver
        self._js: JetStreamContext | None = None
        self._claims = self._claim_prefix = self._submit = ""

    def open(self, js: JetStreamContext, claims_bucket: str, submit_stream: str) -> None:
        """Read through `js`: the id claims' bucket and the stream submissions wait on."""
        self._js = js
        self._claims = f"KV_{claims_bucket}"
        self._claim_prefix = f"$KV.{claims_bucket}."
        self._submit = submit_stream

    def wait_s(self, attempt: int) -> float | None:
        """How long the envelope's `attempt`-th delivery waits before the next; None when it
        is decided now. One step behind the backoff a failed submission is retried on, so
        that each look comes after another try of the cause."""
        if attempt > self._max_deliver - _KEPT_FOR_A_RETRY:
            return None
        return self._backoff_s[min(attempt, len(self._backoff_s) - 1)]

    def _may_go_again(self, attempt: int) -> bool:
        """Whether a delivery after `attempt` will come (JetStream stops at `max_deliver`)."""
        return attempt < self._max_deliver

    async def all_deferred(
        self, verdicts: Sequence[Verdict], store: GateStore
    ) -> dict[int, bool | Exception]:
        """`deferred` for each verdict of a batch refused as `unknown_cause`, looked up at
        once (by `id(ctx)`; a look-up that failed gives its exception, to retry it)."""
        candidates = [v for v in verdicts if _unknown_cause(v.outcome)]
        if not candidates:
            return {}
        found = await asyncio.gather(
            *(self.deferred(v.outcome, v.ctx, store) for v in candidates), return_exceptions=True
        )
        out: dict[int, bool | Exception] = {}
        for verdict, result in zip(candidates, found, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise result  # the gate is stopping: not this envelope's to answer
                result = RuntimeError(f"the look-up of its cause ended: {result!r}")
            out[id(verdict.ctx)] = result
        return out

    async def still_deciding(self, cause_id: str, ctx: Context) -> bool | None:
        """Whether a submission by another sender, before `ctx`'s, claimed `cause_id` and
        is still on PARLEY_SUBMIT; None when nothing claimed it (so no position of it can
        exist: a position is written only after its id's claim, which outlives it).

        The claim is read from the bucket's leader, not by a direct get, which any replica
        answers: one still catching up after a restart (the very outage that left the cause
        unfinished) would not hold the claim yet.
        """
        js = self._js
        if js is None:
            raise RuntimeError("the gate looked a cause up before it started")
        try:
            subject = self._claim_prefix + id_key(cause_id)
            stored = await js.get_msg(self._claims, subject=subject)
            claim = msgspec.json.decode(stored.data or b"", type=Claim)
        except NotFoundError:
            return None
        except msgspec.DecodeError:
            return False
        if not 0 < claim.seq < ctx.stream_seq or claim.sender == ctx.sender:
            return False  # answers nothing kept, submitted after this, or the sender's own
        try:
            kept = await js.get_msg(self._submit, seq=claim.seq)
        except NotFoundError:
            return False  # acked: decided, every effect stored
        return claim_of_bytes(claim.sender, claim.seq, kept.data or b"") == claim

    async def deferred(self, outcome: object, ctx: Context, store: GateStore) -> bool:
        """Defer `ctx`'s envelope if it was refused only because the gate is still deciding
        its cause, or has recorded it since the envelope was planned; True when deferred
        (nothing of it is published now)."""
        if not _unknown_cause(outcome) or not self._may_go_again(ctx.attempt):
            return False
        deciding = await self.still_deciding(ctx.causation_id, ctx)
        if deciding is None:
            return False  # never claimed: a forged id
        cause = position_key(ctx.causation_id)
        # Read afresh, now and next time: the retry that records the cause may be another
        # replica's, and may have come between the plan's read and this one.
        store.forget([cause])
        wait_s = self.wait_s(ctx.attempt) if deciding else None
        if wait_s is None:
            if (await store.load([cause])).get(cause) is None:
                return False
            wait_s = 0.0  # recorded meanwhile: decided again with it
        ctx.defer(wait_s)
        log.info(
            "deciding later: its cause is still being decided",
            extra={"id": ctx.envelope_id, "cause": ctx.causation_id, "wait_s": wait_s},
        )
        return True


def _unknown_cause(outcome: object) -> bool:
    return isinstance(outcome, Deny) and outcome.rule == "unknown_cause"
