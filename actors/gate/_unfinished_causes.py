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
the cause's id is claimed (the gate took it in, actors/gate/_ids.py) and the submission that
claimed it is still on PARLEY_SUBMIT, a work queue the gate acks only once every effect is
stored. Then the envelope is decided later (a deferral, not a failure), once the cause's
retry recorded its position. A cause never claimed, or whose submission is gone (decided:
refused, or admitted and its position since expired), is refused as before, and so is any
cause still unfinished at the envelope's last delivery: a sender cannot hold an envelope
past its deliveries by naming another's unfinished id (and one it was not delivered is then
refused as `foreign_cause`). Reading PARLEY_SUBMIT costs two reads, and only on this path.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from actors.gate._ids import Claim, claim_of_bytes
from actors.gate._plan import Deny
from actors.gate._records import id_key, position_key
from actors.gate._store import GateStore
from bus import Context

__all__ = ("UnfinishedCauses",)

log = logging.getLogger("parley.actors.gate")


class UnfinishedCauses:
    """Tells an envelope whose cause the gate is still deciding, and how long it waits."""

    def __init__(
        self,
        js: JetStreamContext,
        claims_bucket: str,
        submit_stream: str,
        backoff_s: Sequence[float],
        ack_wait_s: float,
        max_deliver: int,
    ) -> None:
        self._js = js
        self._claims = f"KV_{claims_bucket}"
        self._claim_prefix = f"$KV.{claims_bucket}."
        self._submit = submit_stream
        self._backoff_s = tuple(backoff_s)
        self._ack_wait_s = ack_wait_s
        self._max_deliver = max_deliver

    def wait_s(self, attempt: int) -> float | None:
        """How long the envelope's `attempt`-th delivery waits before the next; None on its
        last delivery (it is decided now). The retries' backoff first, as the cause's own
        retries go; then an ack wait, by which the cause was delivered again too."""
        if attempt >= self._max_deliver:
            return None
        if attempt <= len(self._backoff_s):
            return self._backoff_s[attempt - 1]
        return self._ack_wait_s

    async def still_deciding(self, cause_id: str) -> bool:
        """Whether the submission that claimed `cause_id` is still on PARLEY_SUBMIT.

        The claim is read from the bucket's leader, not by a direct get, which any replica
        answers: one still catching up after a restart (the very outage that left the cause
        unfinished) would not hold the claim yet.
        """
        try:
            stored = await self._js.get_msg(
                self._claims, subject=self._claim_prefix + id_key(cause_id)
            )
            claim = msgspec.json.decode(stored.data or b"", type=Claim)
        except (NotFoundError, msgspec.DecodeError):
            return False
        if claim.seq <= 0:  # an id the gate made itself (its own errors)
            return False
        try:
            kept = await self._js.get_msg(self._submit, seq=claim.seq)
        except NotFoundError:
            return False  # acked: decided, every effect stored
        return claim_of_bytes(claim.sender, claim.seq, kept.data or b"") == claim

    async def deferred(self, outcome: object, ctx: Context, store: GateStore) -> bool:
        """Defer `ctx`'s envelope if it was refused only because the gate is still deciding
        its cause; True when deferred (nothing of it is published now)."""
        if not (isinstance(outcome, Deny) and outcome.rule == "unknown_cause"):
            return False
        wait_s = self.wait_s(ctx.attempt)
        if wait_s is None or not await self.still_deciding(ctx.causation_id):
            return False
        # Read afresh next time: the retry that records the cause may be another replica's.
        store.forget([position_key(ctx.causation_id)])
        ctx.defer(wait_s)
        log.info(
            "deciding later: its cause is still being decided",
            extra={"id": ctx.envelope_id, "cause": ctx.causation_id, "wait_s": wait_s},
        )
        return True
