"""What a terminal shows for a session's events: seed 001's turns and seed 004's calls, and
seed 000's three voices of an orchestrated session.

`parley collab`, `say`, `orchestrate` and the demos print each event of a session's timeline
as it comes, in one line (or a few); events not worth a line give None.
"""

from __future__ import annotations

from schemas import SessionEvent
from tools._interactions import seconds
from tools._terminal_text import terminal_safe

__all__ = ("banner", "call_line", "render", "render_event")


def render(event: SessionEvent, max_rounds: int) -> str | None:
    """One line (or a few) for the terminal, or None for events not worth a line; what
    agents wrote in it shown safely (tools/_terminal_text.py)."""
    line = _render(event, max_rounds)
    return None if line is None else terminal_safe(line)


def _render(event: SessionEvent, max_rounds: int) -> str | None:
    payload = event.payload
    match event.event_type:
        case "session_created":
            who = ", ".join(str(p) for p in payload.get("participants", []))
            rounds = "1 round" if max_rounds == 1 else f"{max_rounds} rounds"
            return f"session {event.session_id}: {who}, up to {rounds}"
        case "step_completed":
            head = f"[{event.speaker} · {event.round}/{max_rounds}] {payload.get('message', '')}"
            handoff = payload.get("handoff")
            # A handoff in the last round (a single call's only one) is never followed.
            if isinstance(handoff, dict) and (event.round or 0) < max_rounds:
                head += f"\n    → {handoff.get('to')}: {handoff.get('task')}"
            return head
        case "tool_requested" | "tool_completed" if payload.get("call_id"):
            return call_line(event)
        case "approval_requested":
            approval_id = str(payload.get("approval_id", ""))
            return (
                f"{payload.get('title', '')} (risk {payload.get('risk_level', '?')}): "
                f"{payload.get('action_summary', '')}\n"
                + decision_lines(approval_id, event.session_id)
            )
        case "session_completed" | "session_failed" | "session_canceled":
            lines = [f"stopped: {event.stop_reason} (round {event.round})"]
            if payload.get("code"):
                lines.append(f"    error: {payload['code']}: {payload.get('message', '')}")
            elif payload.get("message"):
                lines.append(f"    message: {payload['message']}")
            if payload.get("warning"):
                lines.append(f"    warning: {payload['warning']}")
            return "\n".join(lines)
    return None


def decision_lines(approval_id: str, session_id: str) -> str:
    """The two commands that decide a held tool request (tools/approvals.py)."""
    tail = f"{approval_id} --session {session_id}"
    return f"  approve: parley approvals approve {tail}\n  reject:  parley approvals reject {tail}"


def call_line(event: SessionEvent) -> str | None:
    """Seed 004's lines for a call between agents the gate told the timeline of
    (actors/gate/_timeline.py): `gpt calling coder with task: …` when it is made (and
    `coder returned: REFUSED (…)` if the gate refused it), `coder returned: SUCCESS (812
    tokens, 2s)` when its answer comes, with the tools it used under it."""
    payload = event.payload
    status = str(payload.get("status", "")).upper()
    reason = str(payload.get("reason", ""))
    if event.event_type == "tool_requested":
        target = payload.get("target", "?")
        line = f"{payload.get('caller', '?')} calling {target} with task: {payload.get('task', '')}"
        return f"{line}\n{target} returned: REFUSED ({reason})" if status == "REFUSED" else line
    figures = []
    if isinstance(payload.get("tokens"), int):
        figures.append(f"{payload['tokens']} tokens")
    if isinstance(payload.get("duration_ms"), int):
        figures.append(seconds(payload["duration_ms"]))
    detail = ", ".join(figures)
    if status != "SUCCESS" and reason:
        detail = f"{detail}; {reason}" if detail else reason
    line = f"{payload.get('agent', '?')} returned: {status}" + (f" ({detail})" if detail else "")
    used = payload.get("tools_used")
    if isinstance(used, list) and used:
        line += f"\n  Tools used: {', '.join(str(name) for name in used)}"
    return line


_LIMITS = {
    "max_turns": "TURN LIMIT",
    "max_duration": "TIME LIMIT",
    "max_failures": "FAILURE LIMIT",
    "max_tokens": "TOKEN BUDGET",
}
_SENT_BY = {"auto": "auto-sent", "approved": "approved", "edited": "edited by you"}


def banner(event: SessionEvent) -> str:
    """The closing lines: a banner when a limit ended the run, else how it ended."""
    reason = str(event.payload.get("reason", ""))
    label = _LIMITS.get(event.stop_reason or "")
    if label is not None:
        rule = "=" * 8
        return f"{rule} {label} REACHED {rule}\n{reason}\nstopped: {event.stop_reason}"
    return f"stopped: {event.stop_reason}" + (f"\n    {reason}" if reason else "")


def render_event(event: SessionEvent, max_turns: int) -> str | None:
    """A timeline line for one event, or None for events not worth one; what agents wrote in
    it shown safely (tools/_terminal_text.py)."""
    line = _render_event(event, max_turns)
    return None if line is None else terminal_safe(line)


def _render_event(event: SessionEvent, max_turns: int) -> str | None:
    payload = event.payload
    turn = f"{event.round}/{max_turns}"
    match event.event_type, payload.get("role"):
        case "session_created", _:
            return (
                f"objective: {payload.get('objective', '')}\n"
                f"Local Agent: {payload.get('local_agent')} · Remote Agent: "
                f"{payload.get('shared_agent')} · mode {payload.get('orchestration_mode')} · "
                f"up to {max_turns} {'turn' if max_turns == 1 else 'turns'}"
            )
        case "step_completed", "local_agent":
            return f"[Local Agent · {turn}] {payload.get('message', '')}"
        case "step_completed", "remote_agent":
            return f"[Remote Agent · {turn}] {payload.get('message', '')}"
        case "step_completed", "failure":
            return (
                f"! {event.speaker} failed ({payload.get('failures')} in a row): "
                f"{payload.get('code')}: {payload.get('message')}"
            )
        case "step_started", "outbound":
            sent_by = str(payload.get("sent_by", ""))
            if sent_by == "you":
                return f"[You · {turn}] {payload.get('message', '')}\n    → {event.speaker}"
            return f"    → {event.speaker} ({_SENT_BY.get(sent_by, sent_by)})"
        case "approval_requested", _:
            reasons = "; ".join(str(r) for r in payload.get("reasons", []))
            return f"    awaiting your approval ({reasons})"
        case "approval_resolved", _:
            return f"[You · {turn}] {payload.get('decision')}"
        case "session_paused", _:
            return "paused: nothing is sent until you resume (r)"
        case "session_resumed", _:
            return "resumed"
        case (("session_completed" | "session_failed" | "session_canceled"), _):
            return banner(event)
    return None
