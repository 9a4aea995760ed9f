"""What the gate publishes for a decided envelope: deliveries, refusals, decisions.

Every effect is published through the input's outbox (`ctx.outbox`), so the runtime acks the
input only once JetStream stored all of them, and every effect's id derives from the input, so
publishing again after a crash stores nothing twice. The gate actor (actors/gate/_actor.py)
decides; this module only says it, to the target, the sender, the caller waiting on a refused
answer, and the decisions subject. Deliveries and decisions go in the handled batch's fast
batches (bus/_fastbatch.py): one answer per stream and batch, not one per message.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from msgspec import Struct, structs

from actors.gate._decide import Allow
from actors.gate._decisions import decision_for, tag
from actors.gate._ids import Claim, IdClaims, claim_of
from actors.gate._llm_timeline import llm_event
from actors.gate._metrics import DecisionCounter
from actors.gate._plan import Deny, Route, Submission
from actors.gate._records import Position, position_key
from actors.gate._redaction import redacted
from actors.gate._refusal_budget import RefusalBudget
from actors.gate._refusals import error_for, error_position, sender_position, waiting_on
from actors.gate._roles import ALLOWED_TOOLS, role_of, told_to_receiver
from actors.gate._store import GateStore
from actors.gate._timeline import call_event
from actors.gate._tool_checks import held_for_approval
from actors.gate._verdicts import Verdict
from bus import SENDER, BundleStore, Context, Outbox, TraceHeaders, wire_size
from schemas import (
    AnyEnvelope,
    Decision,
    DelegationRequest,
    Error,
    ErrorCode,
    Namespace,
    derive_id,
    encode,
    return_kinds,
    utc_now,
    valid_token,
)

__all__ = ("ALLOWED_TOOLS", "GateEffects")

log = logging.getLogger("parley.actors.gate")

_RETURN_KINDS = return_kinds()
_THE_GATES_STATE = frozenset({"no_bundle", "expired"})
"""Refusals for want of a bundle in force: not the sender's doing, so no budget is spent."""
_HEADER_BOUND = 2048
"""More than a delivery's headers without an allowed-tools list can take (its ids are at most
128 characters, its names subject tokens): a payload this far below the limit fits as is."""


class GateEffects:
    """Publishes a gate's effects, as the gate (`actor_id`) and this process (`me`)."""

    def __init__(
        self,
        namespace: Namespace,
        actor_id: str,
        me: str,
        bundles: BundleStore,
        ids: IdClaims,
        store: GateStore,
        redact_key: bytes,
        refusals: RefusalBudget,
    ) -> None:
        self.namespace = namespace
        self.actor_id = actor_id
        self._me = me
        self._bundles = bundles
        self._ids = ids
        self._store = store
        self._redact_key = redact_key
        self.refusals = refusals
        """Each sender's refusals a minute: the one that spends the last says so."""
        self._deliver_stream = namespace.stream("deliver")
        self._events_stream = namespace.stream("events")
        self.decisions: DecisionCounter | None = None
        """Counts each decision once stored; set by the gate when it serves metrics."""

    async def refuse_duplicate(self, ctx: Context, envelope: AnyEnvelope, held: Claim) -> None:
        """Refuse a message whose envelope id another submission holds: nothing is planned,
        charged or recorded for it, and its error and decision take ids of their own (those
        of the holder's would be dropped as duplicates by JetStream)."""
        whose = "the gate" if held.sender == self.actor_id else f"submission {held.seq}"
        deny = Deny(
            ErrorCode.DUPLICATE_ENVELOPE,
            "duplicate_id",
            f"envelope id {envelope.id[:80]!r} is already held by {whose}: the gate decides "
            "each id once; send a new envelope with a new id",
            value=held.seq,
        )
        log.warning("refused a repeated envelope id", extra={"id": envelope.id})
        basis = derive_id(envelope.id, f"duplicate.{ctx.stream_seq}")
        await self.refuse(ctx, envelope, deny, None, basis=basis)
        if ctx.causation_id and type(envelope) in _RETURN_KINDS:
            # Rare, so off the hot path: an answer under a taken id would be lost to its caller.
            causes = await self._store.load([position_key(ctx.causation_id)])
            sub = Submission(envelope, ctx.sender, ctx.causation_id, ctx.headers, 0)
            held_call = waiting_on(envelope, sender_position(sub, causes))
            if held_call is not None:
                await self.tell_caller(
                    self._store, ctx.outbox, ctx.sender, envelope.id, deny, held_call,
                    answering=claim_of(ctx), basis=basis,
                )  # fmt: skip

    def too_large(
        self, ctx: Context, envelope: AnyEnvelope, route: Route, max_message: int
    ) -> Deny | None:
        """A refusal of an envelope whose delivery would exceed the largest message the
        server and the streams take (headers included), decided before anything is spent."""
        if (
            len(ctx.payload) + _HEADER_BOUND <= max_message
            and route.position.levels[-1].tools is None
            and not isinstance(envelope, DelegationRequest)  # a redacted copy may be longer
        ):
            return None  # the hot path: no headers built twice
        payload, headers = self.delivery(
            ctx,
            envelope,
            route.position,
            redacted(envelope, route.profile.redact_pii, self._redact_key),
        )
        size = wire_size(payload, headers)
        if size <= max_message:
            return None
        return Deny(
            ErrorCode.INVALID_REQUEST,
            "envelope_too_large",
            f"envelope too large: {size} > {max_message} bytes once delivered "
            "(payload and headers)",
            limit=max_message,
            value=size,
        )

    async def tell_caller(
        self,
        store: GateStore,
        outbox: Outbox,
        sender: str,
        answer_id: str,
        deny: Deny,
        within: Position,
        *,
        answering: Claim | None,
        basis: str = "",
    ) -> None:
        """Deliver a refused answer's error to the caller that waits for it, at its level.

        The error is about the call, not the answer: its `cause_id` and causation are the
        call's id, which is what the caller waits on (the router accepts an error from the
        gate about its pending call, and ends the session with it). Not retryable: calling
        again would not make this answer admissible, and the caller should not wait longer.

        Args:
            sender: who answered; `answer_id`: the refused answer's id (claimed).
            within: the answerer's position inside the call (`levels[-1]` is its call).
            answering: the claim of the submission refused (`IdClaims.mark`).
        """
        call_id = within.levels[-1].call_id
        details: dict[str, object] = {"rule": deny.rule, "call_id": call_id, "answer_id": answer_id}
        if deny.limit is not None:
            details["limit"] = deny.limit
        if deny.value is not None:
            details["value"] = deny.value
        error = Error(
            id=derive_id(basis or answer_id, "refused-answer"),
            created_at=utc_now(),
            code=deny.code,
            message=f"{sender}'s answer was refused: {deny.code}: {deny.message}"[:1000],
            details=details,
            cause_id=call_id,
        )
        levels = within.levels[:-1]
        at = structs.replace(
            within,
            envelope_id=error.id,
            sender=self.actor_id,
            target=levels[-1].holder,
            kind="error",
            levels=levels,
        )
        await self._ids.mark(outbox, error.id, self.actor_id, answering)
        key = position_key(error.id)
        store.remember(key, at, await outbox.publish(store.subject(key), store.encode(at), {}))
        headers = TraceHeaders(
            trace_id=at.trace_id, hop_count=at.hop, causation_id=call_id, origin=at.origin
        ).to_headers(error.id)
        headers[SENDER] = self.actor_id
        await outbox.publish(self.namespace.deliver(at.target), encode(error), headers)

    async def claim_own(self, ctx: Context, envelope_id: str) -> None:
        """Claim an id the gate made and records a position for, so no sender can reuse it."""
        await self._ids.mark(ctx.outbox, envelope_id, self.actor_id, claim_of(ctx))

    @staticmethod
    async def record(store: GateStore, ctx: Context, key: str, value: Struct | None) -> None:
        """Write a record no other message can touch before the envelope is delivered, on the
        same connection: a position, or a new trace's first count.

        A plain put: the record is a function of the envelope, so writing it again after a
        crash writes the same thing.
        """
        if value is None:
            return
        stored = await ctx.outbox.publish(store.subject(key), store.encode(value), {})
        store.remember(key, value, stored)

    async def deliver(
        self,
        ctx: Context,
        envelope: AnyEnvelope,
        position: Position,
        *,
        redacted: AnyEnvelope | None,
    ) -> None:
        """Publish the envelope to its target: the sender's exact bytes, or a redacted copy."""
        payload, headers = self.delivery(ctx, envelope, position, redacted)
        subject = self.namespace.deliver(position.target)
        await ctx.outbox.publish_batched(self._deliver_stream, subject, payload, headers)

    def delivery(
        self,
        ctx: Context,
        envelope: AnyEnvelope,
        position: Position,
        redacted: AnyEnvelope | None,
    ) -> tuple[bytes, dict[str, str]]:
        """The payload and headers of an envelope's delivery to its target."""
        level = position.levels[-1]
        headers = TraceHeaders(
            trace_id=position.trace_id,
            hop_count=position.hop,
            causation_id=ctx.causation_id,
            origin=position.origin,
            deadline_ms=level.deadline_ms,
        ).to_headers(derive_id(envelope.id, "deliver"))
        headers.update(told_to_receiver(self._bundles, envelope, position))
        payload = encode(redacted) if redacted is not None else ctx.payload or encode(envelope)
        return payload, headers

    def role_of(self, sender: str) -> str:
        """What the receiver may let `sender` do beyond its own (bus/_bundles.py)."""
        return role_of(self._bundles, sender)

    async def refuse(
        self,
        ctx: Context,
        envelope: AnyEnvelope,
        deny: Deny,
        cause: Position | None,
        *,
        basis: str = "",
    ) -> None:
        """Deliver the refusal of `envelope` to its sender and record the decision.

        `basis` is what the effects' ids derive from (the envelope's id unless given).
        """
        notice = "" if deny.rule in _THE_GATES_STATE else self.refusals.spend(ctx.sender)
        if notice:
            deny = replace(deny, message=deny.message + notice)
        error = error_for(envelope, deny, "refused", basis)
        trace = cause.trace_id if cause else envelope.id
        headers = TraceHeaders(
            trace_id=trace,
            hop_count=cause.hop if cause else 0,
            causation_id=envelope.id,
            origin=cause.origin if cause else ctx.sender,
        ).to_headers(error.id)
        headers[SENDER] = self.actor_id
        await ctx.outbox.publish(self.namespace.deliver(ctx.sender), encode(error), headers)
        where = cause or Position(
            envelope_id=envelope.id,
            trace_id=trace,
            origin=ctx.sender,
            sender=ctx.sender,
            target="",
            kind=tag(envelope),
            levels=(),
        )
        await self.decide_record(ctx, envelope, deny.rule, where, deny, basis=basis)

    async def publish(self, store: GateStore, verdict: Verdict) -> None:
        """Record positions and publish the effects of one decided message, pipelined."""
        outcome, ctx, envelope = verdict.outcome, verdict.ctx, verdict.envelope
        if isinstance(outcome, Position):
            log.info("delivering again an envelope admitted before", extra={"id": envelope.id})
            bundle = self._bundles.bundle
            profile = bundle.profiles.get(ctx.sender) if bundle else None
            copy = redacted(envelope, profile.redact_pii if profile else True, self._redact_key)
            await self.deliver(ctx, envelope, outcome, redacted=copy)
            await self.decide_record(ctx, copy or envelope, "allow", outcome, None)
            return
        if isinstance(outcome, Allow):
            position = outcome.route.position
            await self.record(store, ctx, position_key(position.envelope_id), position)
            copy = redacted(envelope, outcome.route.profile.redact_pii, self._redact_key)
            await self.deliver(ctx, envelope, position, redacted=copy)
            # The decision's preview is taken from what was delivered: redacted if it was.
            await self.decide_record(ctx, copy or envelope, "allow", position, None)
            store.known_absent(outcome.unborn_keys())
            return
        cause = verdict.judged.cause
        if cause is not None:
            at = error_position(envelope, ctx.sender, cause)
            await self.claim_own(ctx, at.envelope_id)
            await self.record(store, ctx, position_key(at.envelope_id), at)
        await self.refuse(ctx, envelope, outcome, cause)
        if verdict.judged.refused_return is not None:
            await self.tell_caller(
                store, ctx.outbox, ctx.sender, envelope.id, outcome, verdict.judged.refused_return,
                answering=claim_of(ctx),
            )  # fmt: skip

    async def decide_record(
        self,
        ctx: Context,
        envelope: AnyEnvelope,
        rule: str,
        position: Position,
        deny: Deny | None,
        *,
        basis: str = "",
    ) -> None:
        """Publish the decision about `envelope` on its sender's decisions subject."""
        decision = decision_for(
            ctx.sender,
            ctx.causation_id,
            envelope,
            position,
            rule if deny is not None else "allow",
            deny,
            basis=basis,
            bundles=self._bundles,
            decided_by=self._me,
        )
        # A decision sits in the trace of the envelope it decides, caused by that envelope.
        headers = TraceHeaders(
            trace_id=decision.trace_id,
            hop_count=decision.hop_count,
            causation_id=envelope.id,
            origin=decision.origin,
        ).to_headers(decision.id)
        headers[SENDER] = self.actor_id
        subject = self.namespace.decisions(ctx.sender)
        await ctx.outbox.publish_batched(self._events_stream, subject, encode(decision), headers)
        if self.decisions is not None:
            self.decisions.count(ctx, decision)
        await self._tell_timeline(ctx, envelope, decision, position)

    async def _tell_timeline(
        self, ctx: Context, envelope: AnyEnvelope, decision: Decision, position: Position
    ) -> None:
        """Tell the person a trace works for of a call made (or answered) in it, on the
        timeline of the session its root was sent in (actors/gate/_timeline.py; a model
        call's, actors/gate/_llm_timeline.py)."""
        bundle = self._bundles.bundle
        held = (
            held_for_approval(bundle, envelope, position) if bundle and decision.allowed else None
        )
        event = call_event(decision, position.session_id, held) or llm_event(
            decision, envelope, position.session_id
        )
        if (
            event is None
            or self.role_of(decision.origin) != "person"
            or not valid_token(decision.origin)
            or not valid_token(event.session_id)
        ):
            return
        headers = TraceHeaders(
            trace_id=decision.trace_id,
            hop_count=decision.hop_count,
            causation_id=decision.envelope_id,
            origin=decision.origin,
        ).to_headers(event.id)
        headers[SENDER] = self.actor_id
        subject = self.namespace.events(decision.origin, event.session_id)
        await ctx.outbox.publish(subject, encode(event), headers)
