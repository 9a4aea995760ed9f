"""The host side of agents calling agents: send a brain's requests, wait durably, go on.

A brain may answer a call with requests to other agents (actors/delegation/). The host then
stores a `Wait` for the call (create-only, keyed by the call's id) before it sends anything,
sends every request through the gate as the call's own effect (one hop deeper, in its trace),
and puts a reminder of the round's deadline on its own `parley.timers.<host>.own`. Then it acks
the call: nothing of the wait lives only in memory.

Each answer (a `delegation_response`, a `sub_agent_result`, or an `error` about a request)
is recorded in the wait with compare-and-set. The handler whose write completes the round
asks the brain again with every round so far; the brain either asks again (a chain's next
step) or answers, and the next round or the answer is stored in the wait before it is sent,
naming the delivery that made it (`stepped_by`). That message is acked only once what it
sent is stored; a host killed in between is redelivered it, and it alone sends the step again
(a round with its deadlines counted from then): the brain is never asked twice. The round's
reminder gives every request still unanswered at its deadline a `timeout` result
("Delegation timeout after 5000ms"), which completes the round with what came in: a
fan-out's partial results; an earlier round's reminder leaves the round in progress to its
own. An answer that comes after its deadline, or twice, is ignored (the gate has audited it).

Every id is derived from the call's (`request-<round>-<n>`, `reply`, `error`, `deadline-<round>`),
so whatever a crash repeats is the same message again, which JetStream drops.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgspec

from actors.agent._step_claim import StepClaim, delivery_of, keep_renewed, stored_the_step
from actors.delegation import (
    AgentRequest,
    UseTool,
    Wait,
    WaitConflict,
    WaitStore,
    answered,
    answered_request,
    expire,
    finish_round,
    next_deadline,
    record_result,
    request_envelope,
    request_id,
    restart_deadlines,
    result_of,
    start_round,
    target_of,
)
from bus import MSG_ID, Context, parse_trace_headers
from schemas import (
    AnyEnvelope,
    Error,
    ErrorCode,
    FilteredContext,
    decode_envelope,
    derive_id,
    encode,
    hop_delta_for,
)

__all__ = ("MAX_TOOL_ROUNDS", "Delegator", "Resumed")

log = logging.getLogger("parley.actors.agent.delegation")

MAX_TOOL_ROUNDS = 8
"""Rounds of requests one answer may take by default (a profile's `max_tool_rounds`); past
them the brain is offered no more tools."""

_CONFLICT_RETRIES = 16


@dataclass(frozen=True, slots=True)
class Resumed:
    """What the host's brain made of a call after some rounds: more requests, or the answer."""

    requests: tuple[AgentRequest, ...]
    text: str
    tokens: int
    answer: AnyEnvelope | None
    """The answer (or error) to the call, when the brain is done."""


Ask = Callable[[AnyEnvelope, Wait], Awaitable[Resumed]]
"""Asks the host's brain about a call again, given its wait (finished rounds included)."""
ContextFor = Callable[[Wait, AgentRequest], FilteredContext | None]


class Delegator:
    """Sends a brain's requests and carries its call through the answers, durably."""

    def __init__(
        self,
        host: str,
        store: WaitStore,
        timers: str,
        context_for: ContextFor,
        lease_s: float = 30.0,
    ) -> None:
        """`lease_s`: how long a claim on a step holds without renewal. The handler asking
        the brain renews it every third of that while the brain answers, so a claimant that
        died loses its step to the next handler within one lease."""
        self._host = host
        self._store = store
        self._timers = timers
        self._context_for = context_for
        self._lease_ms = int(lease_s * 1000)

    @staticmethod
    def request_ids(call_id: str, round_index: int, count: int) -> list[str]:
        return [request_id(call_id, round_index, n) for n in range(count)]

    async def begin(
        self,
        ctx: Context,
        requests: tuple[AgentRequest, ...],
        text: str,
        tokens: int,
        started_ms: int,
    ) -> None:
        """The brain answered the call in hand with `requests`: store the wait, send them."""
        wait = Wait(
            call_id=ctx.envelope_id,
            caller=ctx.sender,
            call=ctx.payload,
            headers=dict(ctx.headers),
            started_ms=started_ms,
            stepped_by=delivery_of(ctx),
        )
        ids = self.request_ids(wait.call_id, 0, len(requests))
        wait = start_round(wait, text, requests, ids, _now_ms(), tokens)
        wait, _ = await self._store.create(wait)  # a redelivery's earlier wait stands
        if wait.final:  # another handling of this call answered it meanwhile: the same again
            log.info(
                "call answered meanwhile: its answer sent again", extra={"call_id": wait.call_id}
            )
            await self._publish_for_call(ctx, wait, decode_envelope(wait.final))
            return
        await self._send(ctx, wait)

    async def resume_call(self, ctx: Context, ask: Ask) -> bool:
        """A call delivered again: go on from its wait if it has one (True), else False."""
        found = await self._store.load(ctx.envelope_id)
        if found is None:
            return False
        wait, revision = found
        if wait.final:
            await self._publish_for_call(ctx, wait, decode_envelope(wait.final))
        elif wait.complete:
            await self._resume(ctx, wait, revision, ask)
        else:
            await self._send_again(ctx, wait, revision)
        return True

    async def on_answer(self, envelope: AnyEnvelope, ctx: Context, ask: Ask) -> None:
        """An answer to one of this host's requests: record it; the last one goes on."""
        sent = answered_request(envelope)
        if sent is None:
            return
        if isinstance(envelope, Error) and envelope.code == ErrorCode.DUPLICATE_ENVELOPE:
            return  # a request sent again after a crash: the first one stands
        call_id = await self._store.waiting_on(sent)
        if call_id is None:
            log.info("an answer to no request of this host", extra={"request": sent})
            return
        for _ in range(_CONFLICT_RETRIES):
            found = await self._store.load(call_id)
            if found is None:
                return
            wait, revision = found
            request = wait.request_for(sent)
            if request is None or wait.final:
                if not await self._moved_on(ctx, wait, revision):
                    log.info("late answer ignored", extra={"request": sent, "call_id": call_id})
                return
            updated = record_result(wait, sent, result_of(envelope, request))
            if updated is None:  # recorded before a crash: go on if the round is complete
                if wait.complete:
                    await self._resume(ctx, wait, revision, ask)
                return
            try:
                revision = await self._store.update(updated, revision)
            except WaitConflict:
                continue
            if updated.complete:
                await self._resume(ctx, updated, revision, ask)
            return
        raise WaitConflict(f"the wait of {call_id} kept changing")

    async def on_reminder(self, ctx: Context, ask: Ask) -> None:
        """A round's deadline reminder: time out what is still unanswered, or wait on."""
        for _ in range(_CONFLICT_RETRIES):
            found = await self._store.load(ctx.envelope_id)
            if found is None:
                return
            wait, revision = found
            # The round in progress's own reminder never stored that round: it comes after.
            own = ctx.headers.get(MSG_ID) == derive_id(wait.call_id, f"deadline-{wait.round_index}")
            if wait.final or (not own and stored_the_step(wait, ctx)):
                await self._moved_on(ctx, wait, revision)
                return
            if not wait.requests or not own:
                return  # an earlier round's reminder: the round in progress has its own
            deadline, now = next_deadline(wait), _now_ms()
            if deadline is None:
                # Every answer is in. Whoever claims the step goes on; a handler that
                # completed the round and is asking already holds it (`_resume`).
                await self._resume(ctx, wait, revision, ask)
                return
            if deadline > now:
                ctx.defer((deadline - now) / 1000)
                return
            expired = expire(wait, now)
            if expired is None:
                return
            try:
                revision = await self._store.update(expired, revision)
            except WaitConflict:
                continue
            if expired.complete:
                await self._resume(ctx, expired, revision, ask)
            elif (later := next_deadline(expired)) is not None:
                ctx.defer(max(later - now, 0) / 1000)  # the round's next deadline is this one's too
            return
        raise WaitConflict(f"the wait of {ctx.envelope_id} kept changing")

    async def _moved_on(self, ctx: Context, wait: Wait, revision: int) -> bool:
        """The message in hand found the call past the round it was about: answered, or in a
        later round. If it is the message whose handling stored that step (`stepped_by`), it
        is back because that handling died, or failed to store what it sent, in between: send
        the step again under its recorded ids (JetStream drops a copy already stored). No
        other message would, and the call would wait for ever. Any other message (a late
        answer, a reminder of a round gone by) sends nothing: False."""
        if not stored_the_step(wait, ctx):
            return False
        if wait.final:
            await self._publish_for_call(ctx, wait, decode_envelope(wait.final))
        else:
            await self._send_again(ctx, wait, revision)
        return True

    async def _send_again(self, ctx: Context, wait: Wait, revision: int) -> None:
        """Send the round in progress again, as it may never have gone out: its unanswered
        requests' deadlines count from now (`restart_deadlines`), stored before they are sent."""
        round_index = wait.round_index
        for _ in range(_CONFLICT_RETRIES):
            if wait.final or wait.round_index != round_index or wait.complete:
                return  # its answers came in: it went out, and whoever completed it went on
            restarted = restart_deadlines(wait, _now_ms())
            try:
                await self._store.update(restarted, revision)
            except WaitConflict:
                found = await self._store.load(wait.call_id)
                if found is None:
                    return
                wait, revision = found
                continue
            await self._send(ctx, restarted)
            return
        raise WaitConflict(f"the wait of {wait.call_id} kept changing")

    async def _resume(self, ctx: Context, wait: Wait, revision: int, ask: Ask) -> None:
        """Every request of the round has its result: ask the brain again, store what it
        said (the next round, or the answer), then send it.

        Several handlers may get here for one round (the answers of a fan-out redelivered
        together after a crash, on one replica or several). The one whose compare-and-set
        claims the step asks the brain; the others come back when the claim's lease ends,
        to find the step done, or its claimant dead and the step theirs.
        """
        token = uuid.uuid4().hex
        for _ in range(_CONFLICT_RETRIES):
            if wait.final or not wait.requests or not wait.complete:
                return  # another handler went on already
            now = _now_ms()
            if wait.asking and wait.asking_until_ms > now:
                ctx.defer((wait.asking_until_ms - now) / 1000 + 0.05)
                return
            claimed = msgspec.structs.replace(
                wait, asking=token, asking_until_ms=now + self._lease_ms
            )
            try:
                revision = await self._store.update(claimed, revision)
            except WaitConflict:
                found = await self._store.load(wait.call_id)
                if found is None:
                    return
                wait, revision = found
                continue
            held = StepClaim(claimed, revision, asyncio.Event())
            renewing = asyncio.create_task(keep_renewed(held, self._store, self._lease_ms))
            try:
                await self._go_on(ctx, held, ask, renewing)
            finally:
                held.done.set()
                await asyncio.gather(renewing, return_exceptions=True)
            return
        raise WaitConflict(f"the wait of {wait.call_id} kept changing")

    async def _go_on(
        self, ctx: Context, held: StepClaim, ask: Ask, renewing: asyncio.Task[None]
    ) -> None:
        """Ask the brain with the finished round; store and send what it said."""
        done = finish_round(held.wait)
        call = decode_envelope(held.wait.call)
        resumed = await ask(call, done)
        held.done.set()  # a renewal under way finishes first: its revision is the one to write on
        await asyncio.gather(renewing, return_exceptions=True)
        revision = held.revision
        if resumed.answer is None and resumed.requests:
            ids = self.request_ids(done.call_id, done.round_index, len(resumed.requests))
            following = msgspec.structs.replace(
                start_round(done, resumed.text, resumed.requests, ids, _now_ms(), resumed.tokens),
                stepped_by=delivery_of(ctx),
            )
            try:
                await self._store.update(following, revision)
            except WaitConflict:
                return  # another handler of this wait went on first
            await self._send(ctx, following)
            return
        answer = resumed.answer
        if answer is None:
            raise RuntimeError("the brain neither asked nor answered")
        finished = answered(done, encode(answer), done.tokens + resumed.tokens, delivery_of(ctx))
        try:
            await self._store.update(finished, revision)
        except WaitConflict:
            return
        await self._publish_for_call(ctx, finished, answer)

    async def _send(self, ctx: Context, wait: Wait) -> None:
        """Send the round's unanswered requests (again, after a crash: the same ids) and the
        reminder of its deadline."""
        call = decode_envelope(wait.call)
        pending = [
            (request, sent, expires)
            for request, sent, expires in zip(
                wait.requests, wait.envelope_ids, wait.expires_ms, strict=True
            )
            if request.request_id not in wait.results
        ]
        await self._store.index([sent for _, sent, _ in pending], wait.call_id)
        user_id = str(getattr(call, "user_id", "") or "")
        session = str(getattr(call, "session_id", "") or wait.call_id)
        depth = int(getattr(call, "current_depth", 0) or 0) + 1
        for request, sent, expires in pending:
            envelope = request_envelope(
                request,
                envelope_id=sent,
                sender=self._host,
                user_id=user_id,
                session_id=session,
                depth=depth,
                context=self._context_for(wait, request),
                task_id=wait.call_id,
            )
            log.info(
                "calling",
                extra={"target": target_of(request), "call_id": wait.call_id, "request": sent},
            )
            # A tool request says how long this host waits for it: the runtime starts no
            # step its caller gave up on (the gate takes the claim only to shorten).
            until = expires if isinstance(request, UseTool) else None
            await self._publish_for_call(ctx, wait, envelope, until)
        trace = parse_trace_headers(wait.headers, wait.call_id, root_origin=wait.caller)
        reminder = derive_id(wait.call_id, f"deadline-{wait.round_index}")
        await ctx.outbox.publish(
            self._timers, wait.call, trace.child(wait.call_id).to_headers(reminder)
        )

    async def _publish_for_call(
        self, ctx: Context, wait: Wait, envelope: AnyEnvelope, until_ms: int | None = None
    ) -> None:
        """Submit `envelope` as an effect of the wait's call, whatever message is in hand
        (`until_ms`: a deadline of its own, within the call's)."""
        trace = parse_trace_headers(wait.headers, wait.call_id, root_origin=wait.caller)
        if until_ms is not None and (trace.deadline_ms is None or until_ms < trace.deadline_ms):
            trace = dataclasses.replace(trace, deadline_ms=until_ms)
        headers = trace.child(wait.call_id, hop_delta_for(envelope)).to_headers(envelope.id)
        await ctx.outbox.publish(ctx.submit_subject, encode(envelope), headers)


def _now_ms() -> int:
    return int(time.time() * 1000)
