"""The gate (policy enforcer): the only way from one actor to another.

Every actor submits on `parley.submit.<itself>` (the broker lets it publish nowhere else that
reaches another actor); the gate reads that work queue through one durable consumer shared by
all its replicas, and for each envelope:

1. takes the sender from the subject, and the envelope's position (trace, origin, call chain,
   hop count) from its cause's record, never from the sender's headers (actors/gate/_decide.py);
2. decides against the signed policy bundle in force (actors/gate/_bundles.py) and the counters in
   the traces bucket;
3. commits the counters it spent and the new envelope's position with compare-and-set, for
   the whole fetched batch in one pipelined round (actors/gate/_store.py), except rate tokens
   spent from a lease this replica holds (actors/gate/_rate_leases.py);
4. delivers an admitted envelope to `parley.deliver.<target>`, or an `error` envelope caused
   by a refused one to `parley.deliver.<sender>`, and publishes the decision on
   `parley.decisions.<sender>`; the runtime acks the input only after JetStream stored those.
   A refused answer (for any reason, undecodable included) is also reported to the caller
   waiting on its call, as an `error` about that call (`_tell_caller`).

An admitted envelope whose delivery (the sender's bytes plus the gate's headers) would not fit
the server's `max_payload` or the stream's message size is refused (`INVALID_REQUEST`, nothing
spent) before it is decided: sent, it would close the gate's connection. A submission that
does not decode or validate gets an `INVALID_REQUEST` error on its sender's deliver subject,
naming the field and the reason, beside its dead letter (`rejected()`).

A crash anywhere loses nothing: an input is redelivered until acked, its effects carry ids
derived from it, and a redelivered envelope whose position is already recorded is delivered
again as recorded instead of being counted twice. Every envelope id is decided once: before
deciding, the gate looks the id up and claims a free one create-only with the envelope's
effects (actors/gate/_ids.py); a different message re-using a claimed id is refused as
`DUPLICATE_ENVELOPE`, however long after.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from msgspec import Struct, structs

from actors.gate._bundles import BUNDLE_KEY, BundleStore, load_public_keys
from actors.gate._decide import (
    Allow,
    Ledger,
    decide,
    implied_root_trace,
    required_keys,
    spends_rate,
)
from actors.gate._ids import Claim, IdClaims, claim_of
from actors.gate._plan import Deny, Route, Submission, plan
from actors.gate._rate_leases import RateLeases
from actors.gate._records import Position, position_key, rate_key, trace_key
from actors.gate._redact_key import redaction_key
from actors.gate._store import GateStore
from bus import (
    SENDER,
    SENDER_ROLE,
    AckInbox,
    Actor,
    BusHandle,
    ConfigError,
    Context,
    Input,
    LastValues,
    Outbox,
    Rejection,
    Settings,
    TraceHeaders,
    wire_size,
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
    return_kinds,
    utc_now,
)

__all__ = ("ALLOWED_TOOLS", "BUNDLE_KEY", "GateActor")

log = logging.getLogger("parley.actors.gate")

_RETURN_KINDS = return_kinds()
_RETURN_TAGS = frozenset(str(kind.__struct_config__.tag) for kind in _RETURN_KINDS)
_NO_BUNDLE = Deny(ErrorCode.INTERNAL_ERROR, "no_route", "the gate could not route this envelope")

_CONFLICT_ROUNDS = 6
"""Rounds a batch's conflicting messages are decided again before being redelivered."""
ALLOWED_TOOLS = "Parley-Allowed-Tools"
"""Set on delivered calls: the tools the callee may use, narrowed along the chain."""
_HEADER_BOUND = 2048
"""More than a delivery's headers without an allowed-tools list can take (its ids are at most
128 characters, its names subject tokens): a payload this far below the limit fits as is."""


@dataclass(frozen=True, slots=True)
class _Verdict:
    envelope: AnyEnvelope
    ctx: Context
    outcome: Allow | Deny | Position
    """Admitted, refused, or (a Position) admitted before a crash and delivered again."""
    cause: Position | None = None
    """The sender's own position, where a refusal is delivered (None: unknown, forged)."""
    refused_return: Position | None = None
    """A refused answer's sender's position, inside the call it answers: the caller waiting on
    that call is told too, or it would wait for the answer for ever."""


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
    """Leases given back to their shared buckets before deciding (actors/gate/_rate_leases.py)."""


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
        self._redact_key = redaction_key(options, settings)
        self._cache_size = int(options.get("cache_entries", 200_000))
        self._me = f"{self.actor_id}/{os.getpid()}"
        # Unique per process start: replicas in containers often share a pid, and two
        # replicas under one lease name would overwrite each other's leases.
        self._leases = RateLeases(f"{self._me}/{uuid.uuid4().hex[:12]}")
        self._store: GateStore | None = None
        self._ids: IdClaims | None = None
        self._paid: OrderedDict[str, frozenset[str]] = OrderedDict()
        """Per envelope id: counters its charge is committed to, though the envelope was not
        delivered yet (another of its counters lost a compare-and-set)."""
        self.bundles: BundleStore | None = None
        self._max_message = settings.max_payload
        """Largest message (headers included) the server and the streams take."""

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
        # Compare-and-set writes answer on the gate's own inbox: one subscription, no request
        # machinery per write, and a refusal comes back as an error, not a timeout.
        acks = AckInbox(bus.nc)
        await acks.open()
        self._store = GateStore(acks, traces, bucket, self._cache_size)
        last = LastValues(bus.nc, self.settings.js_api_prefix)
        await last.open()
        self._ids = IdClaims(last, ns.bucket("idempotency"), self._cache_size)
        self._max_message = min(bus.nc.max_payload, self.settings.max_payload)

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

        First every message's envelope id is looked up (actors/gate/_ids.py): one whose id
        another submission holds is refused at once, before anything is planned or charged
        for it; one whose id nobody holds yet claims it with its effects.
        """
        store, bundles, ids = self._store, self.bundles, self._ids
        if store is None or bundles is None or ids is None:
            raise RuntimeError("the gate handled a message before it started")
        results: dict[int, Exception | None] = {}
        pending: list[tuple[AnyEnvelope, Context]] = []
        unclaimed: dict[int, Claim] = {}
        try:
            holders = await ids.holders([envelope.id for envelope, _ in batch])
        except Exception as exc:  # the whole batch is retried
            return [exc] * len(batch)
        first_in_batch: dict[str, Claim] = {}
        for (envelope, ctx), held in zip(batch, holders, strict=True):
            mine = claim_of(ctx)
            if held is None:  # nobody's yet, unless an earlier message of this batch's
                held = first_in_batch.setdefault(envelope.id, mine)
                if held == mine:
                    unclaimed[id(ctx)] = mine
            if held != mine:
                await self._refuse_duplicate(ctx, envelope, held)
                results[id(ctx)] = None
            else:
                pending.append((envelope, ctx))
        for round_ in range(_CONFLICT_ROUNDS):
            if not pending:
                break
            if round_:
                await asyncio.sleep(random.uniform(0, 0.002 * 2**round_))  # noqa: S311 - jitter
            conflicts = await self._decide_and_commit(store, bundles, pending, unclaimed)
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
        unclaimed: Mapping[int, Claim],
    ) -> list[Exception | None]:
        """One round: decide, commit the counters, publish what did not conflict (with the
        claim of each id in `unclaimed`, keyed by `id(ctx)`)."""
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
        committed = (updates.keys() - stale) | local
        for verdict in decided.verdicts:
            failure = self._conflict(verdict, stale)
            self._note_paid(verdict, failure, committed)
            if failure is None:
                if isinstance(verdict.outcome, Allow) and verdict.outcome.route.is_root:
                    position = verdict.outcome.route.position
                    key = trace_key(position.trace_id)
                    if ledger.values[key] != implied_root_trace(position.user_id):
                        await self._record(store, verdict.ctx, key, ledger.values[key])
                claim = unclaimed.get(id(verdict.ctx))
                if claim is not None and self._ids is not None:
                    await self._ids.create(verdict.ctx.outbox, verdict.envelope.id, claim)
                await self._publish(store, verdict)
            results.append(failure)
        return results

    def _note_paid(self, verdict: _Verdict, failure: Exception | None, committed: set[str]) -> None:
        """Remember what an admitted envelope that lost a compare-and-set has already paid.

        The counters of its that were committed hold its charge; deciding it again must not
        charge them twice. Forgotten once it is delivered. Kept per process (bounded): a
        redelivery to another replica, or after a crash between the commit and the delivery,
        is charged again (a gap: counters do not remember who paid them).
        """
        key = verdict.envelope.id
        if failure is None:
            self._paid.pop(key, None)
            return
        if not isinstance(verdict.outcome, Allow):
            return
        route = verdict.outcome.route
        charged = {trace_key(route.position.trace_id)}
        if spends_rate(route):
            charged.add(rate_key(route.sub.sender, route.target))
        paid = self._paid.get(key, frozenset()) | (charged & committed)
        if paid:
            self._paid[key] = paid
            self._paid.move_to_end(key)
            if len(self._paid) > self._cache_size:
                self._paid.popitem(last=False)

    async def _refuse_duplicate(self, ctx: Context, envelope: AnyEnvelope, held: Claim) -> None:
        """Refuse a message whose envelope id another submission holds: nothing is planned,
        charged or recorded for it, and its error and decision take ids of their own (those
        of the holder's would be dropped as duplicates by JetStream)."""
        whose = "the gate" if held.seq == 0 else f"submission {held.seq}"
        deny = Deny(
            ErrorCode.DUPLICATE_ENVELOPE,
            "duplicate_id",
            f"envelope id {envelope.id[:80]!r} is already held by {whose}: the gate decides "
            "each id once; send a new envelope with a new id",
            value=held.seq,
        )
        log.warning("refused a repeated envelope id", extra={"id": envelope.id})
        basis = derive_id(envelope.id, f"duplicate.{ctx.stream_seq}")
        await self._refuse(ctx, envelope, deny, None, basis=basis)
        if ctx.causation_id and self._store is not None and type(envelope) in _RETURN_KINDS:
            # Rare, so off the hot path: an answer under a taken id would be lost to its caller.
            causes = await self._store.load([position_key(ctx.causation_id)])
            sub = Submission(envelope, ctx.sender, ctx.causation_id, ctx.headers, 0)
            held_call = _waiting_on(envelope, self._sender_position(sub, causes))
            if held_call is not None:
                await self._tell_caller(
                    self._store, ctx.outbox, ctx.sender, envelope.id, deny, held_call, basis=basis
                )

    async def _decide_batch(
        self, store: GateStore, bundles: BundleStore, batch: Sequence[tuple[AnyEnvelope, Context]]
    ) -> _Decided:
        """Plan and decide every message of a batch in order, against one ledger."""
        now_ms = int(time.time() * 1000)
        subs = [
            Submission(envelope, ctx.sender, ctx.causation_id, ctx.headers, now_ms, ctx.attempt > 1)
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
        for index, ((envelope, ctx), route) in enumerate(zip(batch, routes, strict=True)):
            if isinstance(route, Route):
                routes[index] = self._too_large(ctx, envelope, route) or route
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
            if isinstance(route, Route) and bundle is not None:
                paid = self._paid.get(envelope.id, frozenset())
                outcome: Allow | Deny = decide(route, ledger, bundle, paid)
            else:
                outcome = route if isinstance(route, Deny) else _NO_BUNDLE
            cause = self._sender_position(sub, causes)
            refused_return: Position | None = None
            # A second answer's call was answered already: nobody waits for it.
            if isinstance(outcome, Deny) and outcome.rule != "duplicate_answer":
                refused_return = _waiting_on(envelope, cause)
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

    def _too_large(self, ctx: Context, envelope: AnyEnvelope, route: Route) -> Deny | None:
        """A refusal of an envelope whose delivery would exceed the largest message the
        server and the streams take (headers included), decided before anything is spent."""
        if (
            len(ctx.payload) + _HEADER_BOUND <= self._max_message
            and route.position.levels[-1].tools is None
            and not isinstance(envelope, DelegationRequest)  # a redacted copy may be longer
        ):
            return None  # the hot path: no headers built twice
        payload, headers = self._delivery(
            ctx,
            envelope,
            route.position,
            _redacted(envelope, route.profile.redact_pii, self._redact_key),
        )
        size = wire_size(payload, headers)
        if size <= self._max_message:
            return None
        return Deny(
            ErrorCode.INVALID_REQUEST,
            "envelope_too_large",
            f"envelope too large: {size} > {self._max_message} bytes once delivered "
            "(payload and headers)",
            limit=self._max_message,
            value=size,
        )

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
            redacted = _redacted(
                envelope, profile.redact_pii if profile else True, self._redact_key
            )
            await self._deliver(ctx, envelope, outcome, redacted=redacted)
            await self._decide_record(ctx, redacted or envelope, "allow", outcome, None)
            return
        if isinstance(outcome, Allow):
            position = outcome.route.position
            await self._record(store, ctx, position_key(position.envelope_id), position)
            redacted = _redacted(envelope, outcome.route.profile.redact_pii, self._redact_key)
            await self._deliver(ctx, envelope, position, redacted=redacted)
            # The decision's preview is taken from what was delivered: redacted if it was.
            await self._decide_record(ctx, redacted or envelope, "allow", position, None)
            return
        if verdict.cause is not None:
            error_position = _error_position(envelope, ctx, verdict.cause)
            await self._claim_own(ctx, error_position.envelope_id)
            await self._record(store, ctx, position_key(error_position.envelope_id), error_position)
        await self._refuse(ctx, envelope, outcome, verdict.cause)
        if verdict.refused_return is not None:
            await self._tell_caller(
                store, ctx.outbox, ctx.sender, envelope.id, outcome, verdict.refused_return
            )

    async def _tell_caller(
        self,
        store: GateStore,
        outbox: Outbox,
        sender: str,
        answer_id: str,
        deny: Deny,
        within: Position,
        *,
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
        if self._ids is not None:
            await self._ids.mark(outbox, error.id, self.actor_id)
        key = position_key(error.id)
        store.remember(key, at, await outbox.publish(store.subject(key), store.encode(at), {}))
        headers = TraceHeaders(
            trace_id=at.trace_id, hop_count=at.hop, causation_id=call_id, origin=at.origin
        ).to_headers(error.id)
        headers[SENDER] = self.actor_id
        await outbox.publish(self.namespace.deliver(at.target), encode(error), headers)

    async def _claim_own(self, ctx: Context, envelope_id: str) -> None:
        """Claim an id the gate made and records a position for, so no sender can reuse it."""
        if self._ids is not None:
            await self._ids.mark(ctx.outbox, envelope_id, self.actor_id)

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
        payload, headers = self._delivery(ctx, envelope, position, redacted)
        await ctx.outbox.publish(self.namespace.deliver(position.target), payload, headers)

    def _delivery(
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
        headers[SENDER] = position.sender
        role = self._role_of(position.sender)
        if role:
            headers[SENDER_ROLE] = role
        if level.tools is not None and level.call_id == envelope.id:
            headers[ALLOWED_TOOLS] = ",".join(level.tools)
        payload = encode(redacted) if redacted is not None else ctx.payload or encode(envelope)
        return payload, headers

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
        error = _error_for(envelope, deny, "refused", basis)
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
        await self._decide_record(ctx, envelope, deny.rule, where, deny, basis=basis)

    async def rejected(self, rejection: Rejection, outbox: Outbox) -> None:
        """Tell the sender of a submission that will not be handled why, on its own deliver
        subject (the sender is the subject's token: known even when nothing decoded).

        The error's id derives from the input's stream sequence, so a redelivery of the same
        bad input is de-duplicated instead of told twice.
        """
        if rejection.stream != self.namespace.stream("submit") or not rejection.sender:
            return
        input_id = f"{rejection.stream}:{rejection.seq}"
        cause = rejection.envelope_id
        details: dict[str, object] = {
            "field": rejection.field,
            "reason": rejection.problem,
            "rule": rejection.reason,
            "stream_seq": rejection.seq,
        }
        if rejection.value is not None:
            details["value"] = rejection.value
        error = Error(
            id=derive_id(input_id, rejection.reason),
            created_at=utc_now(),
            code=ErrorCode.INVALID_REQUEST,
            message=f"submission refused ({rejection.reason}): {rejection.field}: "
            f"{rejection.problem}"[:1000],
            details=details,
            cause_id=cause or None,
        )
        headers = TraceHeaders(
            trace_id=error.id, causation_id=cause, origin=rejection.sender
        ).to_headers(error.id)
        headers[SENDER] = self.actor_id
        await outbox.publish(self.namespace.deliver(rejection.sender), encode(error), headers)
        if rejection.kind in _RETURN_TAGS and rejection.causation_id and self._store is not None:
            # An answer that does not decode is still an answer its caller waits for. The
            # causation is a claim: it counts only if the gate delivered it to this sender.
            causes = await self._store.load([position_key(rejection.causation_id)])
            cause_of = causes.get(position_key(rejection.causation_id))
            within = _in_call(
                cause_of
                if isinstance(cause_of, Position) and cause_of.target == rejection.sender
                else None
            )
            if within is not None:
                deny = Deny(ErrorCode.INVALID_REQUEST, rejection.reason, error.message)
                await self._tell_caller(
                    self._store,
                    outbox,
                    rejection.sender,
                    cause or error.id,
                    deny,
                    within,
                    basis=error.id,
                )

    async def _decide_record(
        self,
        ctx: Context,
        envelope: AnyEnvelope,
        rule: str,
        position: Position,
        deny: Deny | None,
        *,
        basis: str = "",
    ) -> None:
        bundles = self.bundles
        bundle = bundles.bundle if bundles else None
        decision = Decision(
            id=derive_id(basis or envelope.id, "decision"),
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
        # A decision sits in the trace of the envelope it decides, caused by that envelope.
        headers = TraceHeaders(
            trace_id=decision.trace_id,
            hop_count=decision.hop_count,
            causation_id=envelope.id,
            origin=decision.origin,
        ).to_headers(decision.id)
        headers[SENDER] = self.actor_id
        await ctx.outbox.publish(self.namespace.decisions(ctx.sender), encode(decision), headers)


def _redacted(envelope: AnyEnvelope, redact_pii: bool, key: bytes) -> AnyEnvelope | None:
    """A copy of a delegation with secrets and PII redacted, when its sender's profile asks
    (seed 003 security 3), markers keyed by the deployment's `key`; None when nothing is to
    be redacted."""
    if not (redact_pii and isinstance(envelope, DelegationRequest)):
        return None
    return structs.replace(
        envelope,
        objective=redact(envelope.objective, pii=True, key=key),
        input=redact(envelope.input, pii=True, key=key),
        handoff_data=structs.replace(
            envelope.handoff_data,
            facts=tuple(redact(fact, pii=True, key=key) for fact in envelope.handoff_data.facts),
        ),
    )


def _waiting_on(envelope: AnyEnvelope, position: Position | None) -> Position | None:
    """The sender's position if `envelope` answers the call it sits in (someone waits on
    that call), else None; the same test as `answers_call()`, for a refusal with no route."""
    within = _in_call(position)
    if within is None or type(envelope) not in _RETURN_KINDS:
        return None
    if isinstance(envelope, Error) and envelope.cause_id != within.levels[-1].call_id:
        return None
    return within


def _in_call(position: Position | None) -> Position | None:
    """The sender's position if it sits inside a call someone waits on, else None."""
    if position is None or len(position.levels) < 2 or not position.levels[-1].call_id:
        return None
    return position


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


def _error_for(envelope: AnyEnvelope, deny: Deny, purpose: str, basis: str = "") -> Error:
    details: dict[str, object] = {"rule": deny.rule}
    if deny.limit is not None:
        details["limit"] = deny.limit
    if deny.value is not None:
        details["value"] = deny.value
    return Error(
        id=derive_id(basis or envelope.id, purpose),
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
