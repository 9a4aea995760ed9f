"""Tool requests held for their person's decision: holding, deciding, expiring, letting go.

A request whose scope requires approval (seed 002 §13.4) is held in its step's record
(actors/tools/_approvals.py) with a reminder of its expiry on the runtime's own timers subject;
nothing runs and nothing is answered yet. It is decided once, by compare-and-set on that
record, whichever comes first: its owner's `control` (approve or reject, actors/tools/
_decisions.py), its expiry, or its session's end (`canceled`: held on, it stayed on the
owner's list and counted among its agent's calls in flight until it expired). Then it is run
(approved) or denied, and answered. A runtime that dies between the decision and the answer
finds the decision at the next delivery or reminder and completes it, never running an
approved step that changes something twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final

import msgspec
from nats.js.errors import KeyWrongLastSequenceError

from actors.tools._approvals import Approval, request_digest
from actors.tools._contract import ScopeDenied
from actors.tools._decisions import Decisions
from actors.tools._executors import is_read_only
from actors.tools._runs import RunStore, StepState
from actors.tools._steps import Asked, Held, StepRunner, chain_deadline_ms, failed
from bus import MSG_ID, ORIGIN, SESSION, Context
from schemas import (
    Control,
    ErrorCode,
    ToolRequest,
    ToolResult,
    decode_envelope,
    derive_id,
    encode,
)

__all__ = ("Finish", "HeldSteps", "interrupted")

log = logging.getLogger("parley.actors.tools")

_SETTLE_MARGIN_MS: Final = 30_000

Finish = Callable[[Context, Asked, str, StepState, ToolResult], Awaitable[None]]
"""Stores a step's result over its mark, then answers it (the runtime's `_finish`)."""


def interrupted(request: ToolRequest) -> ToolResult:
    """The result of a step a crash cut short that is not run again: it changes something,
    and whether it did is unknown."""
    outcome = failed(
        "TOOL_EXECUTION_FAILED",
        f"interrupted: the tool runtime stopped while step {request.step_id} ran; whether its "
        "effect happened is unknown, so it is not run again",
    )
    return StepRunner.result(request, outcome)


class HeldSteps:
    """The held requests of one tool runtime process."""

    def __init__(
        self,
        runs: RunStore,
        steps: StepRunner,
        decisions: Decisions,
        *,
        timers: str,
        longest_step_s: float,
        finish: Finish,
    ) -> None:
        """`timers`: the runtime's own reminders subject; `longest_step_s`: the longest a step
        runs (its `timeout_s`); `finish`: how a result is stored and answered."""
        self._runs = runs
        self._steps = steps
        self._decisions = decisions
        self._timers = timers
        self._longest_step_ms = int(longest_step_s * 1000)
        self._finish = finish

    async def hold(
        self, ctx: Context, asked: Asked, key: str, begun: StepState, held: Held
    ) -> None:
        """Keep the request for its owner's decision, durably, and remind ourselves of its
        expiry; nothing runs and nothing is answered yet."""
        runs, steps = self._runs, self._steps
        owner = asked.headers.get(ORIGIN, "")
        timeout_s = steps.approval_timeout_s(held.scope)
        expires_ms = _now_ms() + timeout_s * 1000
        # Not past the chain's deadline: the sender stops waiting for the result then, so an
        # approval after it would run a step nobody waits for (the gate tells the person
        # the same shorter window, actors/gate/_timeline.py).
        deadline_ms = chain_deadline_ms(asked)
        if deadline_ms is not None:
            expires_ms = min(expires_ms, deadline_ms)
        approval = Approval(
            approval_id=asked.request.id,
            owner=owner,
            digest=request_digest(encode(asked.request)),
            request=encode(asked.request),
            headers={k: v for k, v in asked.headers.items() if k.startswith("Parley-")},
            sender=asked.sender,
            expires_ms=expires_ms,
            rule_title=steps.approval_title(held.scope),
        )
        try:
            held_state = await runs.hold(key, begun, approval, asked.payers)
        except KeyWrongLastSequenceError:
            ctx.defer(1.0)  # another delivery of it got there first: see what it did
            return
        log.info(
            "held for approval",
            extra={
                "approval_id": approval.approval_id,
                "owner": owner,
                "expires_in_s": round((expires_ms - _now_ms()) / 1000, 1),
            },
        )
        await self.remind(ctx, approval)
        # Its session may have ended between the read that let it be held and its listing:
        # the end's handler then found nothing to let go. The end is stored before it is
        # delivered, so this read or that handler's sees it. (The caller holds its turn.)
        how = await steps.ended(owner, asked.session)
        if how is not None:
            reason = f"session ended ({how})"
            await self._decide_in_turn(ctx, key, held_state, approval, "canceled", "", reason)

    async def remind(self, ctx: Context, approval: Approval) -> None:
        reminder = derive_id(approval.approval_id, "approval-expiry")
        headers = dict(approval.headers) | {MSG_ID: reminder}
        await ctx.outbox.publish(self._timers, approval.request, headers)

    async def on_decision(self, control: Control, ctx: Context) -> None:
        """A person's approve or reject: applied only by the request's owner, once; any other
        is answered on that person's timeline (actors/tools/_decisions.py)."""
        runs = self._runs
        await self._decisions.on_decision(ctx, control, runs, self._decide)

    def settles_ms(self, approval: Approval) -> int:
        """How much longer a decided request may still be running in its decision's handler
        (the longest a step runs, and a margin): until then a redelivery or the reminder
        leaves it alone, after that the handler is taken for dead."""
        settled_at = approval.decided_ms + self._longest_step_ms + _SETTLE_MARGIN_MS
        return max(0, settled_at - _now_ms())

    async def on_reminder(self, request: ToolRequest, ctx: Context) -> None:
        """A held request's expiry: deny it if still undecided, else nothing."""
        runs = self._runs
        found = await runs.find_approval(request.id)
        if found is None:
            return
        key, state = found
        approval = state.run.approval
        if approval is None:
            return
        if not approval.pending:
            await runs.settled(approval)  # off its owner's list, if a crash left it there
            if state.run.result is None:  # decided, and not answered (yet?)
                wait_ms = self.settles_ms(approval)
                if wait_ms > 0:  # its decision's handler may still be running it
                    ctx.defer(wait_ms / 1000)
                    return
                async with self._steps.in_session(approval.headers.get(SESSION, "")):
                    await self.complete(ctx, key, state, approval, recovering=True)
            return
        left_ms = approval.expires_ms - _now_ms()
        if left_ms > 0:
            ctx.defer(left_ms / 1000)
            return
        await self._decide(ctx, key, state, approval, "expired", "", "")

    async def on_session_end(self, ctx: Context, how: str) -> None:
        """A session ended (its person stopped it, it completed or failed): what it still
        holds for its owner is let go, as the console's cancel does, whoever ended it. Held on,
        each stayed on the owner's list and counted among its agent's calls in flight until it
        expired. The agent is answered `SESSION_EXPIRED`, so its host asks its brain no more."""
        runs = self._runs
        owner, session = ctx.sender, ctx.subject.rsplit(".", 1)[-1]
        reason = f"session ended ({how})"
        for entry in await runs.held_for(owner):
            found = (
                await runs.find_approval(entry.approval_id) if entry.session_id == session else None
            )
            if found is None:
                continue
            key, state = found
            approval = state.run.approval
            if approval is not None and approval.pending and approval.owner == owner:
                log.info(
                    "let go: its session ended",
                    extra={"approval_id": entry.approval_id, "session": session, "how": how},
                )
                await self._decide(ctx, key, state, approval, "canceled", "", reason)

    async def _decide(
        self,
        ctx: Context,
        key: str,
        state: StepState,
        approval: Approval,
        decision: str,
        by: str,
        reason: str,
    ) -> bool:
        """`_decide_in_turn`, once it is its session's turn (`StepRunner.in_session`): the
        decision's time is then when its step may start, as `settles_ms` counts."""
        async with self._steps.in_session(approval.headers.get(SESSION, "")):
            found = await self._runs.read(key)  # as it stands now that it is our turn
            if found is None or found.run.approval is None:
                return False
            state, approval = found, found.run.approval
            if not approval.pending:
                log.info("decided meanwhile", extra={"approval_id": approval.approval_id})
                return False
            return await self._decide_in_turn(ctx, key, state, approval, decision, by, reason)

    async def _decide_in_turn(
        self,
        ctx: Context,
        key: str,
        state: StepState,
        approval: Approval,
        decision: str,
        by: str,
        reason: str,
    ) -> bool:
        """Record the decision (compare-and-set: one decision wins), then complete the step;
        False: another decision won."""
        runs = self._runs
        decided = msgspec.structs.replace(
            approval,
            decision=decision,
            decided_by=by,
            reason=reason[:500],
            decided_ms=_now_ms(),
            decided_with=ctx.envelope_id,
        )
        try:
            state = await runs.update(
                key, state, msgspec.structs.replace(state.run, approval=decided)
            )
        except KeyWrongLastSequenceError:
            log.info("decided meanwhile", extra={"approval_id": approval.approval_id})
            return False
        await runs.settled(decided)
        await self.complete(ctx, key, state, decided, recovering=False)
        return True

    async def complete(
        self, ctx: Context, key: str, state: StepState, approval: Approval, *, recovering: bool
    ) -> None:
        """Run the decided request (approved) or deny it, and answer. `recovering`: the
        runtime died after the decision and before the answer, so an approved step that
        changes something may have run: it is not run again. The caller holds the session's
        turn (`StepRunner.in_session`)."""
        steps = self._steps
        decision, by, reason = approval.decision, approval.decided_by, approval.reason
        request = decode_envelope(approval.request)
        if not isinstance(request, ToolRequest):
            raise TypeError(f"a held request is a {type(request).__name__}")
        asked = Asked(request, approval.sender, approval.headers)
        extra = {"approval": decision, "decided_by": by, "reason": reason}
        if decision == "approved" and recovering and not is_read_only(request):
            await self._finish(ctx, asked, key, state, interrupted(request))
            return
        if decision == "approved":
            outcome = await steps.run(asked, approved=True)
            if isinstance(outcome, Held):  # cannot happen: approved runs are never held
                raise RuntimeError("an approved request was held again")
        elif decision == "canceled":  # its session ended first
            outcome = ScopeDenied(
                "requires_approval",
                f"{request.tool_name} was not run: its {reason} while it waited for approval",
                ErrorCode.SESSION_EXPIRED,
            )
        else:
            # "Shell.Exec was expired: not decided in time" read oddly (a newcomer's walk).
            ended = (
                f"was rejected by {by}"
                if decision == "rejected"
                else "expired: not decided in time"
            )
            outcome = ScopeDenied(
                "requires_approval",
                f"{request.tool_name} {ended}{': ' + reason if reason else ''}",
                ErrorCode.APPROVAL_DENIED,
            )
        await self._finish(ctx, asked, key, state, steps.result(request, outcome, extra))


def _now_ms() -> int:
    return int(time.time() * 1000)
