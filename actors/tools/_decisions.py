"""A person's decision on a held request: applied, or answered at once.

A `control` (approve or reject) names a held request by its approval id (actors/tools/
_approvals.py). The runtime applies it only if it comes from the request's owner while the
request is held, once (the actor's `_decide`: compare-and-set on the step's record). Any other
decision changes nothing, and its sender would learn nothing until their command gave up
waiting for the step's end. So the runtime answers it where that person already looks: their
own timeline of the session the control named, `parley.events.<sender>.<session>` (the
sender is the gate's word, so the answer lands on no one else's timeline, and the broker lets
no one else read it), as an `error` caused by the control, as the router answers a control it
refuses; `parley approvals`, `say`, `collab`, `task` and the console print such an error. The
answer is stored in the events stream, and so in the audit history; it is not filed as a dead
letter too (the runtime's letters share one bounded subject, which one person's refused
decisions would empty of everyone else's).

Two answers, each a code of its own:

- `APPROVAL_NOT_FOUND`: no request of the sender's is held by that id. Said alike, word for
  word, whether no request has that id or one has and is someone else's (held or decided):
  a stranger learns nothing of another person's requests, not even that one exists. It is
  said on a second look, `LOOK_AGAIN_S` after the first (the control is deferred once), in
  both cases: the request the gate has just told of may be being held at that very moment
  (a hold retried, another replica), and a not-found said at once for an unknown id but
  later for another's would tell the two apart by its timing.
- `APPROVAL_ALREADY_DECIDED`: the sender's own request, decided before: how (approved,
  rejected, or expired), by whom and when, from the step's record. The owner's decision that
  comes after the request expired (its reminder late) denies it, then is answered so from
  the record (or from the decision that won, had another come first). A redelivery of the
  control that decided the request (the runtime died before its ack) is that decision, and is
  not answered: the record names the envelope that decided it (`Approval.decided_with`).

A decision that comes while its request is not held yet, and still is not a second later (a
runtime restarting, its hold redelivered only after the ack wait), is answered
`APPROVAL_NOT_FOUND` and changes nothing: the person may decide again once it is listed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Final

from actors.tools._approvals import Approval
from actors.tools._runs import RunStore, StepState
from bus import SENDER, Context
from schemas import Control, Error, ErrorCode, utc_now, valid_token

__all__ = ("LOOK_AGAIN_S", "Decide", "Decisions", "already_decided", "not_found")

Decide = Callable[[Context, str, StepState, Approval, str, str, str], Awaitable[bool]]
"""The actor's `_decide(ctx, key, state, approval, decision, by, reason)`: records the
decision and completes the step; False when another decision won."""

log = logging.getLogger("parley.actors.tools")

LOOK_AGAIN_S: Final = 1.0
"""How long a decision that finds no request of its sender's waits before it is looked at
again and answered."""


def _details(control: Control, approval_id: str) -> dict[str, str]:
    return {"session_id": control.session_id, "target": "tools", "approval_id": approval_id}


def not_found(control: Control, error_id: str) -> Error:
    """The answer to a decision that names no held request of its sender's; it depends on
    nothing but the control, so it says nothing of anyone else's requests."""
    approval_id = control.approval_id or ""
    return Error(
        id=error_id,
        created_at=utc_now(),
        code=ErrorCode.APPROVAL_NOT_FOUND,
        message=f"no tool request of yours is held as {approval_id!r}",
        details=_details(control, approval_id),
        cause_id=control.id,
    )


def _at(ms: int) -> str:
    return f"{datetime.fromtimestamp(ms / 1000, UTC):%Y-%m-%d %H:%M:%S} UTC"


def already_decided(control: Control, approval: Approval, error_id: str) -> Error:
    """The answer to the owner's decision on a request decided before: how, by whom, when."""
    expired = approval.decision == "expired"
    at = approval.expires_ms if expired else approval.decided_ms
    if expired:
        how = f"expired at {_at(at)}: not decided in time"
    else:
        by = f" by {approval.decided_by}" if approval.decided_by else ""
        because = f": {approval.reason}" if approval.reason else ""
        how = f"{approval.decision}{by} at {_at(at)}{because}"
    details = _details(control, approval.approval_id) | {
        "decision": approval.decision,
        "decided_by": approval.decided_by,
        "decided_at": datetime.fromtimestamp(at / 1000, UTC).isoformat(),
    }
    return Error(
        id=error_id,
        created_at=utc_now(),
        code=ErrorCode.APPROVAL_ALREADY_DECIDED,
        message=f"tool request {approval.approval_id} was decided already: {how}",
        details=details,
        cause_id=control.id,
    )


class Decisions:
    """Applies a person's decisions, and answers those it cannot apply on their timeline."""

    def __init__(self, actor_id: str) -> None:
        self._actor_id = actor_id

    async def on_decision(
        self, ctx: Context, control: Control, runs: RunStore, decide: Decide
    ) -> None:
        """Apply `control` if its sender owns the held request it names, else answer it. The
        owner is checked before anything else is said, so a stranger hears nothing that
        depends on the request (held, decided, expired)."""
        approval_id = control.approval_id or ""
        found = await runs.find_approval(approval_id) if approval_id else None
        approval = found[1].run.approval if found is not None else None
        if found is None or approval is None or ctx.sender != approval.owner:
            await self._not_yours(ctx, control, approval)
            return
        key, state = found
        if not approval.pending:
            await runs.settled(approval)  # off its owner's list, if a crash left it there
            if approval.decided_with != ctx.envelope_id:  # else: this control, redelivered
                await self._decided_already(ctx, control, approval)
            return
        late = time.time() * 1000 >= approval.expires_ms  # the expiry's reminder is late too
        decision = "expired" if late else "approved" if control.action == "approve" else "rejected"
        by, reason = ("", "") if late else (ctx.sender, control.reason)
        if await decide(ctx, key, state, approval, decision, by, reason) and not late:
            return
        again = await runs.find_approval(approval_id)  # expired, or another decision won
        recorded = again[1].run.approval if again is not None else None
        if recorded is not None and not recorded.pending:
            await self._decided_already(ctx, control, recorded)

    async def _not_yours(self, ctx: Context, control: Control, approval: Approval | None) -> None:
        """No held request of the sender's by that id (`approval`: another's, or None): on the
        first delivery look again later, then answer `APPROVAL_NOT_FOUND`."""
        if ctx.attempt < 2:
            ctx.defer(LOOK_AGAIN_S)
            return
        approval_id = control.approval_id or ""
        if approval is None:
            log.warning("a decision names no held request", extra={"approval_id": approval_id})
        else:
            log.warning(
                "a decision from someone who does not own the request was ignored",
                extra={"approval_id": approval_id, "sender": ctx.sender, "owner": approval.owner},
            )
        await self._answer(ctx, control, not_found(control, ctx.derive_id("approval-answer")))

    async def _decided_already(self, ctx: Context, control: Control, approval: Approval) -> None:
        log.info(
            "a decision on a request decided already", extra={"approval_id": approval.approval_id}
        )
        error = already_decided(control, approval, ctx.derive_id("approval-answer"))
        await self._answer(ctx, control, error)

    async def _answer(self, ctx: Context, control: Control, error: Error) -> None:
        """On the sender's timeline of the session the control named: stored in the events
        stream and so in the audit history. Not as a dead letter too: the runtime's letters
        share one bounded subject, where one person's refused decisions would push out
        everyone else's letters (docs/quotas.md)."""
        if valid_token(ctx.sender) and valid_token(control.session_id):
            timeline = ctx.namespace.events(ctx.sender, control.session_id)
            await ctx.publish(timeline, error, extra_headers={SENDER: self._actor_id})
