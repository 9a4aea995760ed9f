"""The gate (policy enforcer): the only way from one actor to another.

Every actor submits on `parley.submit.<itself>` (the broker lets it publish nowhere else that
reaches another actor); the gate reads that work queue through one durable consumer shared by
all its replicas, and for each envelope:

1. takes the sender from the subject, and the envelope's position (trace, origin, call chain,
   hop count) from its cause's record, never from the sender's headers (actors/_decide.py);
2. decides against the signed policy bundle in force (actors/_bundles.py) and the counters in
   the traces bucket;
3. commits the counters it spent and the new envelope's position with compare-and-set, for
   the whole fetched batch in one pipelined round (actors/_gate_store.py), except rate tokens
   spent from a lease this replica holds (actors/_rate_leases.py);
4. delivers an admitted envelope to `parley.deliver.<target>`, or an `error` envelope caused
   by a refused one to `parley.deliver.<sender>`, and publishes the decision on
   `parley.decisions.<sender>`; the runtime acks the input only after JetStream stored those.

A crash anywhere loses nothing: an input is redelivered until acked, its effects carry ids
derived from it, and a redelivered envelope whose position is already recorded is delivered
again as recorded instead of being counted twice.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from msgspec import Struct, structs

from actors._bundles import BUNDLE_KEY, BundleStore, load_public_keys
from actors._decide import Allow, Ledger, decide, implied_root_trace, required_keys
from actors._gate_records import Position, position_key, trace_key
from actors._gate_store import GateStore
from actors._plan import Deny, Route, Submission, plan
from actors._rate_leases import RateLeases
from bus import (
    SENDER,
    SENDER_ROLE,
    Actor,
    BusHandle,
    ConfigError,
    Context,
    Input,
    Settings,
    TraceHeaders,
)
from schemas import (
    AnyEnvelope,
    Decision,
    DelegationRequest,
    Error,
    ErrorCode,
    derive_id,
    encode,
    redact,
    utc_now,
)

__all__ = ("ALLOWED_TOOLS", "BUNDLE_KEY", "GateActor")

log = logging.getLogger("parley.actors.gate")

_NO_BUNDLE = Deny(ErrorCode.INTERNAL_ERROR, "no_route", "the gate could not route this envelope")

_CONFLICT_ROUNDS = 6
"""Rounds a batch's conflicting messages are decided again before being redelivered."""
ALLOWED_TOOLS = "Parley-Allowed-Tools"
"""Set on delivered calls: the tools the callee may use, narrowed along the chain."""


@dataclass(frozen=True, slots=True)
class _Verdict:
    envelope: AnyEnvelope
    ctx: Context
    outcome: Allow | Deny | Position
    """Admitted, refused, or (a Position) admitted before a crash and delivered again."""
    cause: Position | None = None
    """The sender's own position, where a refusal is delivered (None: unknown, forged)."""
    refused_return: Position | None = None
    """A refused answer's would-be position: its caller is told too, or it would wait for the
    answer for ever."""


@dataclass(frozen=True, slots=True)
class _Decided:
    """A decided batch: its verdicts, the ledger they spent from, and what that involves."""

    verdicts: list[_Verdict]
    ledger: Ledger
    new_traces: set[str]
    """Root trace records: written with their root's delivery, never compare-and-set."""
    local: frozenset[str]
    """Rate keys decided against this replica's own leases: nothing to commit."""
    planned: list[Route]
    now_ms: int
    returned: dict[str, tuple[float, int]]
    """Leases given back to their shared buckets before deciding (actors/_rate_leases.py)."""


class GateActor(Actor):
    """Reads every submission, decides, commits, delivers."""

    kind: ClassVar[str] = "gate"
    handles_batches: ClassVar[bool] = True
    settles_behind: ClassVar[bool] = True

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        options = settings.options
        keys = options.get("policy_keys", [])
        if isinstance(keys, str):
            keys = [keys]
        try:
            self._trusted = load_public_keys(list(keys))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if not self._trusted:
            raise ConfigError("the gate needs options.policy_keys: the signers' public keys")
        self._tenant = str(options.get("tenant", "default"))
        self._cache_size = int(options.get("cache_entries", 200_000))
        self._me = f"{self.actor_id}/{os.getpid()}"
        # Unique per process start: replicas in containers often share a pid, and two
        # replicas under one lease name would overwrite each other's leases.
        self._leases = RateLeases(f"{self._me}/{uuid.uuid4().hex[:12]}")
        self._store: GateStore | None = None
        self.bundles: BundleStore | None = None

    def inputs(self) -> Sequence[Input]:
        ns = self.namespace
        return (Input(ns.stream("submit"), ns.wildcard("submit"), self.actor_id, "subject"),)

    async def start(self, bus: BusHandle) -> None:
        ns = self.namespace
        policy = await bus.js.key_value(ns.bucket("policy"))
        self.bundles = BundleStore(policy, self._trusted, self._tenant)
        await self.bundles.load()
        bucket = ns.bucket("traces")
        traces = await bus.js.key_value(bucket)
        self._store = GateStore(bus.js, traces, bucket, self._cache_size)

    async def background(self, stopping: asyncio.Event) -> None:
        if self.bundles is not None:
            await self.bundles.watch(stopping)

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        errors = await self.handle_batch([(envelope, ctx)])
        if errors[0] is not None:
            raise errors[0]

    async def handle_batch(
        self, batch: Sequence[tuple[AnyEnvelope, Context]]
    ) -> list[Exception | None]:
        """Decide a fetched batch, commit what it spends in one round, then publish.

        A message whose admission relied on a counter another replica changed first is
        decided again at once with fresh values (a few rounds, with jitter, so two replicas
        on one hot counter do not keep invalidating each other); only one still in conflict
        after that is returned as failed, to be redelivered. Redelivery alone would spend the
        message's deliveries on contention and dead-letter good traffic.
        """
        store, bundles = self._store, self.bundles
        if store is None or bundles is None:
            raise RuntimeError("the gate handled a message before it started")
        results: dict[int, Exception | None] = {}
        pending = list(batch)
        for round_ in range(_CONFLICT_ROUNDS):
            if round_:
                await asyncio.sleep(random.uniform(0, 0.002 * 2**round_))  # noqa: S311 - jitter
            conflicts = await self._decide_and_commit(store, bundles, pending)
            for (_, ctx), failure in zip(pending, conflicts, strict=True):
                results[id(ctx)] = failure
            pending = [item for item, failure in zip(pending, conflicts, strict=True) if failure]
            if not pending:
                break
        return [results[id(ctx)] for _, ctx in batch]

    async def _decide_and_commit(
        self,
        store: GateStore,
        bundles: BundleStore,
        batch: Sequence[tuple[AnyEnvelope, Context]],
    ) -> list[Exception | None]:
        """One round: decide, commit the counters, publish what did not conflict."""
        decided = await self._decide_batch(store, bundles, batch)
        ledger, local = decided.ledger, decided.local
        taken = self._leases.grants(ledger, decided.planned, local, decided.now_ms)
        updates: dict[str, Struct] = {}
        for key in ledger.dirty - decided.new_traces - local:
            value = ledger.values[key]
            if value is not None:
                updates[key] = value
        stale = await store.commit(updates, timeout=self.settings.ack_wait_s / 2)
        self._leases.spent(ledger, local)
        self._leases.granted(taken, stale, decided.returned)
        results: list[Exception | None] = []
        for verdict in decided.verdicts:
            failure = self._conflict(verdict, stale)
            if failure is None:
                if isinstance(verdict.outcome, Allow) and verdict.outcome.route.is_root:
                    position = verdict.outcome.route.position
                    key = trace_key(position.trace_id)
                    if ledger.values[key] != implied_root_trace(position.user_id):
                        await self._record(store, verdict.ctx, key, ledger.values[key])
                await self._publish(store, verdict)
            results.append(failure)
        return results

    async def _decide_batch(
        self, store: GateStore, bundles: BundleStore, batch: Sequence[tuple[AnyEnvelope, Context]]
    ) -> _Decided:
        """Plan and decide every message of a batch in order, against one ledger."""
        now_ms = int(time.time() * 1000)
        subs = [
            Submission(envelope, ctx.sender, ctx.causation_id, ctx.headers, now_ms)
            for envelope, ctx in batch
        ]
        replayed = await self._recorded(store, batch)
        causes = await store.load(
            position_key(sub.causation_id) for sub in subs if sub.causation_id
        )
        bundle = bundles.bundle
        routes: list[Route | Deny | Position] = []
        for sub, replay in zip(subs, replayed, strict=True):
            if replay is not None:
                routes.append(replay)
                continue
            cause = causes.get(position_key(sub.causation_id)) if sub.causation_id else None
            routes.append(
                plan(sub, cause if isinstance(cause, Position) else None, bundle, bundles.problem)
            )
        # A root's trace record cannot exist yet (the trace is named after the root), so it
        # is neither read nor compare-and-set: it is written with the root's delivery.
        new_traces = {
            trace_key(route.position.trace_id)
            for route in routes
            if isinstance(route, Route) and route.is_root
        }
        planned = [route for route in routes if isinstance(route, Route)]
        local = self._leases.covered(planned, now_ms)
        counters = await store.load(
            key
            for route in planned
            for key in required_keys(route)
            if key not in new_traces and key not in local
        )
        ledger = Ledger({**counters, **dict.fromkeys(new_traces), **local})
        returned = self._leases.fold(ledger, now_ms)
        verdicts: list[_Verdict] = []
        for (envelope, ctx), sub, route in zip(batch, subs, routes, strict=True):
            if isinstance(route, Position):
                verdicts.append(_Verdict(envelope, ctx, route))
                continue
            refused_return: Position | None = None
            if isinstance(route, Route) and bundle is not None:
                outcome: Allow | Deny = decide(route, ledger, bundle)
                if isinstance(outcome, Deny) and route.role == "return":
                    refused_return = route.position
            else:
                outcome = route if isinstance(route, Deny) else _NO_BUNDLE
            cause = self._sender_position(sub, causes)
            verdicts.append(_Verdict(envelope, ctx, outcome, cause, refused_return))
        return _Decided(verdicts, ledger, new_traces, frozenset(local), planned, now_ms, returned)

    async def _recorded(
        self, store: GateStore, batch: Sequence[tuple[AnyEnvelope, Context]]
    ) -> list[Position | None]:
        """Positions already recorded for redelivered envelopes (admitted before a crash)."""
        again = [position_key(env.id) for env, ctx in batch if ctx.attempt > 1]
        if not again:
            return [None] * len(batch)
        found = await store.load(again)
        out: list[Position | None] = []
        for env, ctx in batch:
            value = found.get(position_key(env.id)) if ctx.attempt > 1 else None
            recorded = value if isinstance(value, Position) and value.sender == ctx.sender else None
            out.append(recorded)
        return out

    @staticmethod
    def _sender_position(sub: Submission, causes: Mapping[str, object]) -> Position | None:
        if not sub.causation_id:
            return None
        cause = causes.get(position_key(sub.causation_id))
        if isinstance(cause, Position) and cause.target == sub.sender:
            return cause
        return None

    @staticmethod
    def _conflict(verdict: _Verdict, stale: frozenset[str]) -> Exception | None:
        outcome = verdict.outcome
        if not stale or not isinstance(outcome, Allow):
            return None
        touched = set(required_keys(outcome.route)) & stale
        if touched:
            return RuntimeError(
                f"another gate replica updated {', '.join(sorted(touched))} first: retrying"
            )
        return None

    async def _publish(self, store: GateStore, verdict: _Verdict) -> None:
        """Record positions and publish the effects of one decided message, pipelined."""
        outcome, ctx, envelope = verdict.outcome, verdict.ctx, verdict.envelope
        if isinstance(outcome, Position):
            log.info("delivering again an envelope admitted before", extra={"id": envelope.id})
            bundle = self.bundles.bundle if self.bundles else None
            profile = bundle.profiles.get(ctx.sender) if bundle else None
            redacted = _redacted(envelope, profile.redact_pii if profile else True)
            await self._deliver(ctx, envelope, outcome, redacted=redacted)
            await self._decide_record(ctx, redacted or envelope, "allow", outcome, None)
            return
        if isinstance(outcome, Allow):
            position = outcome.route.position
            await self._record(store, ctx, position_key(position.envelope_id), position)
            redacted = _redacted(envelope, outcome.route.profile.redact_pii)
            await self._deliver(ctx, envelope, position, redacted=redacted)
            # The decision's preview is taken from what was delivered: redacted if it was.
            await self._decide_record(ctx, redacted or envelope, "allow", position, None)
            return
        if verdict.cause is not None:
            error_position = _error_position(envelope, ctx, verdict.cause)
            await self._record(store, ctx, position_key(error_position.envelope_id), error_position)
        await self._refuse(ctx, envelope, outcome, verdict.cause)
        if verdict.refused_return is not None:
            await self._tell_caller(store, ctx, envelope, outcome, verdict.refused_return)

    async def _tell_caller(
        self, store: GateStore, ctx: Context, envelope: AnyEnvelope, deny: Deny, at: Position
    ) -> None:
        """Deliver a refused answer's error to the caller that waits for it, at its level."""
        error = _error_for(envelope, deny, "refused-answer")
        position = structs.replace(at, envelope_id=error.id, sender=self.actor_id, kind="error")
        await self._record(store, ctx, position_key(error.id), position)
        headers = TraceHeaders(
            trace_id=at.trace_id, hop_count=at.hop, causation_id=envelope.id, origin=at.origin
        ).to_headers(error.id)
        headers[SENDER] = self.actor_id
        await ctx.outbox.publish(self.namespace.deliver(at.target), encode(error), headers)

    @staticmethod
    async def _record(store: GateStore, ctx: Context, key: str, value: Struct | None) -> None:
        """Write a record no other message can touch before the envelope is delivered, on the
        same connection: a position, or a new trace's first count.

        A plain put: the record is a function of the envelope, so writing it again after a
        crash writes the same thing.
        """
        if value is None:
            return
        stored = await ctx.outbox.publish(store.subject(key), store.encode(value), {})
        store.remember(key, value, stored)

    async def _deliver(
        self,
        ctx: Context,
        envelope: AnyEnvelope,
        position: Position,
        *,
        redacted: AnyEnvelope | None,
    ) -> None:
        """Publish the envelope to its target: the sender's exact bytes, or a redacted copy."""
        level = position.levels[-1]
        headers = TraceHeaders(
            trace_id=position.trace_id,
            hop_count=position.hop,
            causation_id=ctx.causation_id,
            origin=position.origin,
            deadline_ms=level.deadline_ms,
        ).to_headers(derive_id(envelope.id, "deliver"))
        headers[SENDER] = position.sender
        role = self._role_of(position.sender)
        if role:
            headers[SENDER_ROLE] = role
        if level.tools is not None and level.call_id == envelope.id:
            headers[ALLOWED_TOOLS] = ",".join(level.tools)
        payload = encode(redacted) if redacted is not None else ctx.payload or encode(envelope)
        await ctx.outbox.publish(self.namespace.deliver(position.target), payload, headers)

    def _role_of(self, sender: str) -> str:
        """What the receiver may let `sender` do beyond its own: `operator`, `person` or ''.

        The router lets the principal that opened a session, or an operator, steer it; it
        cannot read the policy bundle, so the gate says which profiles are operators.
        """
        bundle = self.bundles.bundle if self.bundles else None
        profile = bundle.profiles.get(sender) if bundle else None
        if profile is None:
            return ""
        if profile.operator:
            return "operator"
        return "person" if profile.speaks_for_person else ""

    async def _refuse(
        self, ctx: Context, envelope: AnyEnvelope, deny: Deny, cause: Position | None
    ) -> None:
        error = _error_for(envelope, deny, "refused")
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
            kind=_tag(envelope),
            levels=(),
        )
        await self._decide_record(ctx, envelope, deny.rule, where, deny)

    async def _decide_record(
        self,
        ctx: Context,
        envelope: AnyEnvelope,
        rule: str,
        position: Position,
        deny: Deny | None,
    ) -> None:
        bundles = self.bundles
        bundle = bundles.bundle if bundles else None
        decision = Decision(
            id=derive_id(envelope.id, "decision"),
            created_at=utc_now(),
            allowed=deny is None,
            code=deny.code if deny else None,
            rule="allow" if deny is None else rule,
            message=deny.message if deny else "",
            limit=deny.limit if deny else None,
            value=deny.value if deny else None,
            sender=ctx.sender,
            target=position.target if deny is None else _named(envelope),
            envelope_id=envelope.id,
            envelope_kind=_tag(envelope),
            causation_id=ctx.causation_id,
            trace_id=position.trace_id,
            hop_count=position.hop if position.levels else 0,
            origin=position.origin,
            chain=position.chain,
            user_id=position.user_id,
            session_id=_text_field(envelope, "session_id") or None,
            request_id=_text_field(envelope, "request_id") or None,
            objective=_text_field(envelope, "objective")[:500],
            preview=_preview(envelope),
            bundle_version=bundle.version if bundle else None,
            bundle_hash=bundles.bundle_hash if bundles else "",
            decided_at=utc_now(),
            decided_by=self._me,
        )
        headers = {"Nats-Msg-Id": decision.id, SENDER: self.actor_id}
        await ctx.outbox.publish(self.namespace.decisions(ctx.sender), encode(decision), headers)


def _redacted(envelope: AnyEnvelope, redact_pii: bool) -> AnyEnvelope | None:
    """A copy of a delegation with secrets and PII redacted, when its sender's profile asks
    (seed 003 security 3); None when nothing is to be redacted."""
    if not (redact_pii and isinstance(envelope, DelegationRequest)):
        return None
    return structs.replace(
        envelope,
        objective=redact(envelope.objective, pii=True),
        input=redact(envelope.input, pii=True),
        handoff_data=structs.replace(
            envelope.handoff_data,
            facts=tuple(redact(fact, pii=True) for fact in envelope.handoff_data.facts),
        ),
    )


def _tag(envelope: AnyEnvelope) -> str:
    return str(envelope.__struct_config__.tag)


def _named(envelope: AnyEnvelope) -> str:
    for field in ("target", "target_employee"):
        value = getattr(envelope, field, None)
        if isinstance(value, str):
            return value
    return ""


def _text_field(envelope: AnyEnvelope, name: str) -> str:
    value = getattr(envelope, name, None)
    return value if isinstance(value, str) else ""


def _preview(envelope: AnyEnvelope) -> str:
    for field in ("text", "input", "output", "result", "message"):
        value = getattr(envelope, field, None)
        if isinstance(value, str) and value:
            return value[:200]
    return ""


def _error_for(envelope: AnyEnvelope, deny: Deny, purpose: str) -> Error:
    details: dict[str, object] = {"rule": deny.rule}
    if deny.limit is not None:
        details["limit"] = deny.limit
    if deny.value is not None:
        details["value"] = deny.value
    return Error(
        id=derive_id(envelope.id, purpose),
        created_at=utc_now(),
        code=deny.code,
        message=deny.message,
        retryable=deny.rule in {"rate_per_minute", "max_concurrent_calls", "no_bundle"},
        details=details,
        cause_id=envelope.id,
    )


def _error_position(envelope: AnyEnvelope, ctx: Context, cause: Position) -> Position:
    """Where the refusal of `envelope` sits: with its sender, at the sender's own level."""
    return Position(
        envelope_id=derive_id(envelope.id, "refused"),
        trace_id=cause.trace_id,
        origin=cause.origin,
        sender="gate",
        target=ctx.sender,
        kind="error",
        levels=cause.levels,
        user_id=cause.user_id,
    )
