"""What becomes of a message that is not simply acked: retried, dead-lettered or abandoned.

A failing handler is retried with backoff and dead-lettered on its last delivery. An effect
too large for the server (`MessageTooLarge`) fails its handler for good: it is dead-lettered
at once, since retrying cannot make it smaller. Before an input is dead-lettered unhandled
(bad input: bus/_intake.py, or quarantined: bus/_quarantine.py), the actor's `rejected()` hook
may answer its sender; those effects are stored first.

What is read from PARLEY_DEAD is never dead-lettered again, whatever went wrong: the new dead
letter would land on the stream it came from, be read again, fail again, and loop for ever. A
message of PARLEY_DEAD that cannot be handled is retried like any other and, on its last
delivery, terminated (the server stops redelivering it) with an error in the log and the
`abandoned` outcome counted; it stays in PARLEY_DEAD, a limits stream, so nothing is lost, and
reading it again takes resetting the consumer. For the same reason nobody watches the
max-deliveries advisories of PARLEY_DEAD's consumers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from nats.aio.msg import Msg
from prometheus_client import Counter

from bus._ackinbox import AckInbox, MessageTooLarge
from bus._actor import Actor, Input
from bus._deadletter import DeadLetters
from bus._headers import CAUSATION_ID
from bus._intake import BadInput, Intake, Job
from bus._outbox import Outbox
from bus._quarantine import Settled
from bus._rejection import Rejection, claimed_id, claimed_kind, describe
from schemas import SubjectTokenError

__all__ = ("Failures",)

log = logging.getLogger("parley.bus.runtime")


class Failures:
    """Retries, dead letters and abandoned dead letters of one actor's inputs."""

    def __init__(
        self,
        actor: Actor,
        intake: Intake,
        inbox: AckInbox,
        dead: DeadLetters,
        dead_stream: str,
        outcomes: Mapping[str, Counter],
        settled: Settled,
    ) -> None:
        """`outcomes`: the actor's `handled` counters by outcome (`nacked`, `dead_lettered`,
        `abandoned` are counted here); `settled`: where each nak is noted, so the quarantine
        does not take a clean failure for a death (bus/_quarantine.py)."""
        self._actor = actor
        self._settings = actor.settings
        self._intake = intake
        self._inbox = inbox
        self._dead = dead
        self._dead_stream = dead_stream
        self._outcomes = outcomes
        self._settled = settled

    async def handler_failed(self, spec: Input, job: Job, exc: Exception) -> None:
        """Retry `job` later with backoff, or dead-letter it on its last delivery."""
        ctx = job.ctx
        max_deliver = self._settings.max_deliver if spec.max_deliver is None else spec.max_deliver
        log.warning(
            "handler failed",
            exc_info=exc,
            extra={"attempt": ctx.attempt, "max_deliver": max_deliver, "seq": ctx.stream_seq},
        )
        too_large = isinstance(exc, MessageTooLarge) or isinstance(exc.__cause__, MessageTooLarge)
        if too_large or 0 < max_deliver <= ctx.attempt:
            reason = "effect_too_large" if too_large else "handler_failed"
            await self.dead_letter(spec, job.msg, ctx.stream_seq, ctx.attempt, reason, repr(exc))
            return
        backoff = self._settings.backoff_s
        try:
            await job.msg.nak(delay=backoff[min(ctx.attempt - 1, len(backoff) - 1)])
        except Exception as nak_exc:  # the ack wait redelivers it anyway
            log.debug("nak failed", extra={"error": repr(nak_exc)})
        self._settled.add(spec.stream, ctx.stream_seq)
        self._outcomes["nacked"].inc()

    async def reject(self, spec: Input, msg: Msg, reason: str, detail: str) -> None:
        """Dead-letter an input that will not be handled, after storing what the actor's
        `rejected()` hook tells its sender; if that cannot be stored, retry it later."""
        meta = msg.metadata
        seq, attempt = meta.sequence.stream, meta.num_delivered or 1
        if spec.stream != self._dead_stream:
            try:
                sender = self._intake.sender(spec, msg.subject, msg.headers)
            except (BadInput, SubjectTokenError):
                sender = ""
            field, problem, value = describe(reason, detail, msg.data)
            rejection = Rejection(
                stream=spec.stream,
                seq=seq,
                attempt=attempt,
                subject=msg.subject,
                sender=sender,
                reason=reason,
                detail=detail,
                field=field,
                problem=problem,
                value=value,
                envelope_id=claimed_id(msg.data),
                kind=claimed_kind(msg.data),
                causation_id=(msg.headers or {}).get(CAUSATION_ID, ""),
            )
            outbox = Outbox(self._inbox, stall_s=self._settings.ack_wait_s / 2)
            try:
                await self._actor.rejected(rejection, outbox)
                await outbox.settle(self._settings.ack_wait_s / 2)
            except Exception as exc:
                log.error("could not answer a rejected input", extra={"error": repr(exc)})
                try:
                    await msg.nak(delay=self._settings.backoff_s[-1])
                except Exception as nak_exc:  # the ack wait redelivers it anyway
                    log.debug("nak failed", extra={"error": repr(nak_exc)})
                self._settled.add(spec.stream, seq)
                self._outcomes["nacked"].inc()
                return
        await self.dead_letter(spec, msg, seq, attempt, reason, detail)

    async def dead_letter(
        self, spec: Input, msg: Msg, seq: int, attempt: int, reason: str, detail: str
    ) -> None:
        """Store `msg` as a dead letter, then ack it; abandon it if it is one already."""
        if spec.stream == self._dead_stream:
            await self._abandon(msg, seq, attempt, reason, detail)
            return
        try:
            await self._dead.publish(
                payload=msg.data,
                headers=msg.headers,
                subject=msg.subject,
                stream=spec.stream,
                seq=seq,
                attempt=attempt,
                reason=reason,
                detail=detail,
            )
            await msg.ack_sync(timeout=self._settings.ack_wait_s / 2)
        except Exception as exc:
            # Not stored as dead: leave it to be redelivered rather than lose it.
            log.error("could not dead-letter a message", extra={"error": repr(exc), "seq": seq})
            try:
                await msg.nak(delay=self._settings.backoff_s[-1])
            except Exception as nak_exc:
                log.debug("nak failed", extra={"error": repr(nak_exc)})
            self._settled.add(spec.stream, seq)
            return
        self._outcomes["dead_lettered"].inc()

    async def _abandon(self, msg: Msg, seq: int, attempt: int, reason: str, detail: str) -> None:
        """Give up on a message of PARLEY_DEAD without dead-lettering it (module docstring)."""
        log.error(
            "gave up on a dead letter; it stays in the dead-letter stream",
            extra={"reason": reason, "detail": detail[:300], "seq": seq, "attempt": attempt},
        )
        try:
            await msg.term()
        except Exception as exc:  # redelivered until max_deliver, then left alone by the server
            log.debug("term failed", extra={"error": repr(exc)})
        self._outcomes["abandoned"].inc()
