"""Agents calling agents, told as they happen on the timeline of the person they work for. Pure.

A person follows only their own sessions' timelines (`parley.events.<person>.<session>`), and
the calls agents make to each other while answering appear on neither those nor the person's
decisions: the router never sees them, the gate does. So the gate tells them, as seed 002's
`tool_requested` (a call was made, or refused) and `tool_completed` (its answer came, or was
refused) session events, from the decision it has just made about the call or the answer.
`parley say` and `parley collab` print them in seed 004's words (tools/collab.py).

What goes where is the gate's own record, never a sender's claim: the person is the trace's
origin and the session the one its root was sent in (`Position.session_id`), inherited by
every envelope of the trace. An agent cannot make a line appear on anyone else's timeline,
and a root that named someone else's session id only writes on its own sender's timeline.
The figures are the decision's, so the line and the audit record say the same thing, and the
event names its decision (`TOLD_FROM_DECISION`): the auditor records the decision once, and
not its copy on the timeline again.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from actors.gate._tool_checks import HeldView
from actors.tools import approval_risk, approval_title
from schemas import APPROVAL_TIMEOUT_S, TOLD_FROM_DECISION, Decision, SessionEvent, derive_id

__all__ = ("CALL_TOOLS", "call_event")

CALL_TOOLS: Final = {
    "delegation_request": "delegate_to_agent",
    "sub_agent_call": "call_sub_agent",
    "tool_request": "",
}
"""The envelope kinds of a call, and the tool a brain used to make it (seed 003, seed 004; a
tool request's tool is its capability, the first word of its objective)."""
_REASON_MAX: Final = 300
_ANSWER_TOOLS: Final = {
    "delegation_response": "delegate_to_agent",
    "sub_agent_result": "call_sub_agent",
    "tool_result": "",
}


def _expires_in_s(decision: Decision, held: HeldView) -> int:
    """How long a held request waits for its owner: its rule's `timeout_s`, or less when the
    call chain's deadline comes first. The sender stops waiting for the result then, and the
    runtime holds the request no longer (actors/tools/_held_steps.py)."""
    timeout_s = held.rule.timeout_s if held.rule else APPROVAL_TIMEOUT_S
    if decision.deadline_at is None or decision.decided_at is None:
        return timeout_s
    left_s = int((decision.deadline_at - decision.decided_at).total_seconds())
    return max(0, min(timeout_s, left_s))


def call_event(
    decision: Decision, session_id: str, held: HeldView | None = None
) -> SessionEvent | None:
    """The timeline event for `decision`, or None when it decided no call and no answer to
    one (or the trace has no session to tell it in). `held`: the scope that holds an admitted
    tool request for its owner's approval, told as `approval_requested` (seed 002 §13.4)."""
    if not session_id:
        return None
    kind = decision.envelope_kind
    refused = not decision.allowed
    payload: dict[str, Any]
    event_type: Literal["tool_requested", "tool_completed", "approval_requested"]
    if held is not None and not refused:
        capability = decision.objective.split(" ", 1)[0]
        rule_title = held.rule.title if held.rule else ""
        event_type = "approval_requested"
        payload = {
            "approval_id": decision.envelope_id,
            "title": approval_title(rule_title, decision.sender, capability),
            "action_summary": held.summary,
            "risk_level": approval_risk(capability),
            "expires_in_s": _expires_in_s(decision, held),
            "details": {
                "capability": capability,
                "agent": decision.sender,
                "approval_rule_id": held.scope.approval_rule_id or capability,
                "approval_rule_description": held.rule.description if held.rule else "",
                "digest": held.digest,
            },
        }
        speaker = decision.sender
    elif kind in CALL_TOOLS:
        event_type = "tool_requested"
        payload = {
            "tool": CALL_TOOLS[kind] or decision.objective.split(" ", 1)[0],
            "call_id": decision.envelope_id,
            "caller": decision.sender,
            "target": decision.target,
            "task": decision.objective[:200] or decision.preview,
            "status": "refused" if refused else "requested",
        }
        speaker = decision.sender
    elif kind in _ANSWER_TOOLS:
        event_type = "tool_completed"
        payload = {
            "tool": _ANSWER_TOOLS[kind] or next(iter(decision.tools_used), "tool"),
            "call_id": decision.causation_id,
            "agent": decision.sender,
            "status": "refused" if refused else decision.outcome or "unknown",
            "tokens": decision.tokens,
            "duration_ms": decision.duration_ms,
            "tools_used": list(decision.tools_used),
        }
        speaker = decision.sender
    else:
        return None
    payload[TOLD_FROM_DECISION] = decision.id
    if refused:
        code = decision.code.value if decision.code else "REFUSED"
        payload["reason"] = f"{code}: {decision.message}"[:_REASON_MAX]
    elif decision.reason:
        payload["reason"] = decision.reason
    return SessionEvent(
        id=derive_id(decision.id, "timeline"),
        created_at=decision.decided_at or decision.created_at,
        session_id=session_id,
        event_type=event_type,
        speaker=speaker,
        payload=payload,
    )
