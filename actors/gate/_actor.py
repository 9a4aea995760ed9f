"""The gate (policy enforcer): the only way from one actor to another.

Every actor submits on `parley.submit.<itself>` (the broker lets it publish nowhere else that
reaches another actor); the gate reads that work queue through one durable consumer shared by
all its replicas, and for each envelope:

1. takes the sender from the subject, and the envelope's position (trace, origin, call chain,
   hop count) from its cause's record, never from the sender's headers (actors/gate/_plan.py;
   a root's claimed hop count only ever raises its own, for chains across deployments);
2. decides against the signed policy bundle in force (bus/_bundles.py) and the counters in
   the traces bucket;
3. commits the counters it spent and the new envelope's position with compare-and-set, for
   the whole fetched batch in one pipelined round (actors/gate/_store.py), except rate tokens
   spent from a lease this replica holds (actors/gate/_rate_leases.py);
4. delivers an admitted envelope to `parley.deliver.<target>`, or an `error` envelope caused
   by a refused one to `parley.deliver.<sender>`, and publishes the decision on
   `parley.decisions.<sender>`; the runtime acks the input only after JetStream stored those.
   A refused answer (for any reason, undecodable included) is also reported to the caller
   waiting on its call, as an `error` about that call. The batch is planned and decided by pure
   functions (actors/gate/_batch.py) and its effects published by actors/gate/_effects.py.

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
from collections.abc import Sequence
from typing import ClassVar

from msgspec import Struct
from nats.js.api import PubAck

from actors.gate._batch import counters_needed, decide_batch, new_traces, plan_batch
from actors.gate._decide import Allow, Ledger, implied_root_trace, required_keys
from actors.gate._effects import ALLOWED_TOOLS, GateEffects
from actors.gate._ids import Claim, IdClaims, claim_of
from actors.gate._metrics import DecisionCounter, QuietRefusals
from actors.gate._options import GateOptions
from actors.gate._paid import PaidCharges
from actors.gate._plan import Route, Submission
from actors.gate._rate_leases import RateLeases
from actors.gate._records import position_key, trace_key
from actors.gate._redaction import redaction_key
from actors.gate._refusal_budget import RefusalBudget
from actors.gate._rejected import tell_rejected
from actors.gate._store import GateStore
from actors.gate._unfinished_causes import UnfinishedCauses
from actors.gate._verdicts import Decided, Verdict
from bus import (
    BUNDLE_KEY,
    AckInbox,
    Actor,
    BundleStore,
    BusHandle,
    ConfigError,
    Context,
    Input,
    LastValues,
    Outbox,
    Rejection,
    Settings,
    asked_at_start,
    load_public_keys,
    validated_options,
)
from schemas import AnyEnvelope

__all__ = ("ALLOWED_TOOLS", "BUNDLE_KEY", "GateActor")

log = logging.getLogger("parley.actors.gate")

_CONFLICT_ROUNDS = 6
"""Rounds a batch's conflicting messages are decided again before being redelivered."""


class GateActor(Actor):
    """Reads every submission, decides, commits, delivers."""

    kind: ClassVar[str] = "gate"
    files_by_sender: ClassVar[bool] = True
    handles_batches: ClassVar[bool] = True
    settles_behind: ClassVar[bool] = True

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        options = validated_options(GateOptions, settings.options, "gate")
        try:
            self._trusted = load_public_keys(options.policy_keys)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self._tenant = options.tenant
        self._redact_key = redaction_key(options.redaction_key_file, settings)
        self._cache_size = options.cache_entries
        self._refusals = RefusalBudget(options.refusals_per_minute, options.refusals_exempt)
        self._me = f"{self.actor_id}/{os.getpid()}"
        # Unique per process start: replicas in containers often share a pid, and two
        # replicas under one lease name would overwrite each other's leases.
        self._leases = RateLeases(f"{self._me}/{uuid.uuid4().hex[:12]}")
        self._store: GateStore | None = None
        self._ids: IdClaims | None = None
        self._effects: GateEffects | None = None
        self._quieted = QuietRefusals(None, self.actor_id)  # registered once started
        self._paid = PaidCharges(self._cache_size)
        self._unfinished = UnfinishedCauses(settings.backoff_s, settings.max_deliver)
        self.bundles: BundleStore | None = None
        self._max_message = settings.max_payload
        """Largest message (headers included) the server and the streams take."""

    def inputs(self) -> Sequence[Input]:
        ns = self.namespace
        return (Input(ns.stream("submit"), ns.wildcard("submit"), self.actor_id, "subject"),)

    async def start(self, bus: BusHandle) -> None:
        ns = self.namespace
        # Each look-up of a bucket rides through a cluster election, and is said at once when
        # the server refused it (bus's asked_at_start).
        policy = await asked_at_start(
            bus.refusals, lambda: bus.js.key_value(ns.bucket("policy")), "the policy bucket"
        )
        self.bundles = BundleStore(policy, self._trusted, self._tenant)
        await self.bundles.load()
        bucket = ns.bucket("traces")
        traces = await asked_at_start(
            bus.refusals, lambda: bus.js.key_value(bucket), "the traces bucket"
        )
        # Compare-and-set writes answer on the gate's own inbox: one subscription, no request
        # machinery per write, and a refusal comes back as an error, not a timeout.
        acks = AckInbox(bus.nc, link=bus.link)
        await acks.open()
        self._store = GateStore(acks, traces, bucket, self._cache_size)
        last = LastValues(bus.nc, self.settings.js_api_prefix, link=bus.link)
        await last.open()
        wait_s = self.settings.ack_wait_s / 2  # as the counters' commit waits
        self._ids = IdClaims(acks, last, ns.bucket("idempotency"), self._cache_size, wait_s)
        await asked_at_start(bus.refusals, self._ids.check_server, "the id claims' server check")
        self._effects = GateEffects(
            ns,
            self.actor_id,
            self._me,
            self.bundles,
            self._ids,
            self._store,
            self._redact_key,
            self._refusals,
        )
        self._unfinished.open(bus.js, ns.bucket("idempotency"), ns.stream("submit"))
        self._effects.decisions = DecisionCounter(bus.metrics.registry, self.actor_id)
        self._quieted = QuietRefusals(bus.metrics.registry, self.actor_id)
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
        for it; one whose id nobody holds yet claims it with its effects. A sender past its
        refusal budget (actors/gate/_refusal_budget.py) claims an id only once admitted, and
        its refusals record nothing.
        """
        store, bundles, ids = self._store, self.bundles, self._ids
        if store is None or bundles is None or ids is None or self._effects is None:
            raise RuntimeError("the gate handled a message before it started")
        results: dict[int, Exception | None] = {}
        pending: list[tuple[AnyEnvelope, Context]] = []
        unclaimed: dict[int, Claim] = {}
        mine_of = {id(ctx): claim_of(ctx) for _, ctx in batch}
        quiet = {
            id(ctx) for _, ctx in batch if ctx.attempt == 1 and self._refusals.quiet(ctx.sender)
        }
        # One loop turn lets the look-up's task send it first (after the claims it mostly read
        # them back); the claims go before it is answered. Only speed, not safety, rests on it.
        wanted = [envelope.id for envelope, _ in batch]
        looking_up = asyncio.ensure_future(ids.holders(wanted))
        await asyncio.sleep(0)
        early: dict[int, asyncio.Future[PubAck]] = {}
        claiming: dict[int, asyncio.Future[PubAck]] = {}
        try:
            early = await ids.claim_early(batch, mine_of, later=quiet)
            try:
                holders = await looking_up
            except Exception as exc:  # the whole batch is retried
                return [exc] * len(batch)
            first_in_batch: dict[str, Claim] = {}
            seen: set[int] = set()
            for (envelope, ctx), held in zip(batch, holders, strict=True):
                mine = mine_of[id(ctx)]
                if id(ctx) in quiet and held != mine:
                    if held is None:  # nobody's yet, unless an earlier message of this batch's
                        held = first_in_batch.setdefault(envelope.id, mine)
                    if held == mine:
                        pending.append((envelope, ctx))  # claimed if admitted
                    else:
                        self._quieted.count(ctx.sender)  # a repeated id, refused unrecorded
                        results[id(ctx)] = None
                    continue
                quiet.discard(id(ctx))  # its claim is stored: decided as any other
                if held == mine and id(ctx) in early:
                    held = None  # the look-up found this message's own early claim stored
                if held == mine or ctx.attempt > 1:
                    seen.add(id(ctx))  # this very message was handed to a gate before
                if held is None:  # nobody's yet, unless an earlier message of this batch's
                    held = first_in_batch.setdefault(envelope.id, mine)
                    if held == mine:
                        unclaimed[id(ctx)] = mine
                if held != mine:
                    await self._effects.refuse_duplicate(ctx, envelope, held)
                    results[id(ctx)] = None
                else:
                    pending.append((envelope, ctx))
            # Free ids not claimed early are claimed now, while the batch is decided and its
            # counters committed; nothing of a message is published before its claim is stored.
            for envelope, ctx in pending:
                claim = unclaimed.get(id(ctx))
                if claim is not None:
                    sent = early.get(id(ctx))
                    claiming[id(ctx)] = sent or await ids.create(envelope.id, claim)
            for round_ in range(_CONFLICT_ROUNDS):
                if not pending:
                    break
                if round_:
                    await asyncio.sleep(random.uniform(0, 0.002 * 2**round_))  # noqa: S311
                conflicts = await self._decide_and_commit(
                    store, bundles, pending, claiming, frozenset(seen), frozenset(quiet)
                )
                for (_, ctx), failure in zip(pending, conflicts, strict=True):
                    results[id(ctx)] = failure
                pending = [item for item, failed in zip(pending, conflicts, strict=True) if failed]
        finally:
            looking_up.cancel()  # only ever still running when something else failed first
            await ids.all_settled([*early.values(), *claiming.values()])
        return [results[id(ctx)] for _, ctx in batch]

    async def _decide_and_commit(
        self,
        store: GateStore,
        bundles: BundleStore,
        batch: Sequence[tuple[AnyEnvelope, Context]],
        claiming: dict[int, asyncio.Future[PubAck]],
        seen: frozenset[int],
        quiet: frozenset[int],
    ) -> list[Exception | None]:
        """One round: decide, commit the counters, then publish what did not conflict, each
        message once its id's claim (in `claiming`, by `id(ctx)`) is stored; `seen` holds
        (by `id(ctx)`) the messages handed to a gate before, `quiet` those whose refusal
        records nothing and whose claim is made once they are admitted."""
        ids, effects = self._ids, self._effects
        if ids is None or effects is None:
            raise RuntimeError("the gate handled a message before it started")
        decided = await self._decide_batch(store, bundles, batch, seen)
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
        later = await self._unfinished.all_deferred(decided.verdicts, store)
        for verdict in decided.verdicts:  # quiet admissions' claims, all sent before any waits
            ctx = verdict.ctx
            if id(ctx) in quiet and isinstance(verdict.outcome, Allow):
                if self._conflict(verdict, stale) is None:
                    claiming[id(ctx)] = await ids.create(verdict.envelope.id, claim_of(ctx))
        for verdict in decided.verdicts:
            failure = self._conflict(verdict, stale)
            deferred = later.get(id(verdict.ctx))
            if deferred is True:
                results.append(None)
                continue
            if isinstance(deferred, Exception):  # its cause could not be looked up: retried
                failure = failure or deferred
            ctx, envelope = verdict.ctx, verdict.envelope
            if id(ctx) in quiet and failure is None and not isinstance(verdict.outcome, Allow):
                self._paid.note(envelope.id, verdict.outcome, None, committed)
                self._quieted.count(ctx.sender)  # refused: nothing recorded
                results.append(None)
                continue
            claim = claiming.get(id(ctx))
            if failure is None and claim is not None:
                held = await ids.settled(claim, envelope.id, ctx)
                if isinstance(held, Claim):  # another submission's claim was stored first
                    self._paid.note(envelope.id, verdict.outcome, None, committed)
                    if id(ctx) in quiet:
                        self._quieted.count(ctx.sender)
                    else:
                        await effects.refuse_duplicate(ctx, envelope, held)
                    results.append(None)
                    continue
                failure = held
            self._paid.note(envelope.id, verdict.outcome, failure, committed)
            if failure is None:
                if isinstance(verdict.outcome, Allow) and verdict.outcome.route.is_root:
                    position = verdict.outcome.route.position
                    key = trace_key(position.trace_id)
                    if ledger.values[key] != implied_root_trace(position.user_id):
                        await GateEffects.record(store, ctx, key, ledger.values[key])
                await effects.publish(store, verdict)
            results.append(failure)
        return results

    async def _decide_batch(
        self,
        store: GateStore,
        bundles: BundleStore,
        batch: Sequence[tuple[AnyEnvelope, Context]],
        seen: frozenset[int],
    ) -> Decided:
        """Plan and decide every message of a batch in order, against one ledger
        (actors/gate/_batch.py), reading what each step needs from KV between the steps."""
        effects = self._effects
        if effects is None:
            raise RuntimeError("the gate handled a message before it started")
        now_ms = int(time.time() * 1000)
        subs = [
            Submission(envelope, ctx.sender, ctx.causation_id, ctx.headers, now_ms)
            for envelope, ctx in batch
        ]
        recorded = await store.recorded([item for item in batch if id(item[1]) in seen])
        replayed = [recorded.get(id(ctx)) for _, ctx in batch]
        causes = await store.load(
            position_key(sub.causation_id) for sub in subs if sub.causation_id
        )
        bundle = bundles.bundle
        routes = plan_batch(subs, replayed, causes, bundle, bundles.problem)
        roots = new_traces(routes)
        for index, ((envelope, ctx), route) in enumerate(zip(batch, routes, strict=True)):
            if isinstance(route, Route):
                refusal = effects.too_large(ctx, envelope, route, self._max_message)
                routes[index] = refusal or route
        planned = [route for route in routes if isinstance(route, Route)]
        local = self._leases.covered(planned, now_ms)
        counters = await store.load(counters_needed(planned, roots | local.keys()))
        ledger = Ledger({**counters, **dict.fromkeys(roots), **local})
        returned = self._leases.fold(ledger, now_ms)
        judged = decide_batch(subs, routes, causes, ledger, bundle, self._paid.of)
        verdicts = [
            Verdict(envelope, ctx, verdict)
            for (envelope, ctx), verdict in zip(batch, judged, strict=True)
        ]
        return Decided(verdicts, ledger, roots, frozenset(local), planned, now_ms, returned)

    @staticmethod
    def _conflict(verdict: Verdict, stale: frozenset[str]) -> Exception | None:
        outcome = verdict.outcome
        if not stale or not isinstance(outcome, Allow):
            return None
        touched = set(required_keys(outcome.route)) & stale
        if touched:
            return RuntimeError(
                f"another gate replica updated {', '.join(sorted(touched))} first: retrying"
            )
        return None

    async def rejected(self, rejection: Rejection, outbox: Outbox) -> None:
        """Tell the sender of a submission that will not be handled why."""
        if self._effects is not None and self._store is not None:
            if not await tell_rejected(self._effects, self._store, rejection, outbox):
                self._quieted.count(rejection.sender)
