"""The causal tree of one trace, drawn from its audit records. Pure.

Each decision record names an envelope, what caused it and who sent it to whom; linking
`causation_id` to `envelope_id` rebuilds who called whom. A fact recorded for both its sender
and its target appears once (the sender's copy); session events hang under the trace as a
timeline of their own.

A delegation or a sub-agent call is drawn on one line with its answer folded in (seed 003's
and 004's figures: status, tokens, duration, and the tools granted and used), since a call
and its answer are one interaction; the answer's own line would only repeat the call's.
Whatever the answer caused hangs under the call.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from schemas import AuditRecord
from tools._interactions import Interaction, decisions_by_envelope, interactions, verdict

__all__ = ("render_trace",)


def _line(record: AuditRecord, kind: str = "") -> str:
    arrow = f"{record.requester} -> {record.target or '?'}"
    code = record.decision_code or ""
    verdict = record.status + (f" {code}" if code and code != "ALLOW" else "")
    extra = f"  ({record.failure_reason})" if record.failure_reason else ""
    when = record.created_at.strftime("%H:%M:%S.%f")[:-3]
    policy = f" policy v{record.policy_version}" if record.policy_version is not None else ""
    return (
        f"{arrow}  {kind or record.task}  hop {record.hop_count}  {verdict}{policy}  "
        f"at {when}{extra}"
    )


def _call_line(item: Interaction, now: datetime | None) -> str:
    """A call and its answer on one line: `… => SUCCESS (174 tokens, 0.1s)  tools: …`."""
    kind = f"{item.mode} {item.shape}".strip()
    line = _line(item.call, kind)
    if not item.refused:  # a refusal's reason is on the line already
        ended = verdict(item, now)
        line += f"  => {ended}" if ended is not None else "  => no answer yet"
    if item.call.tools is not None:
        line += f"  tools: {', '.join(item.call.tools) or 'none'}"
    if item.answer is not None and item.answer.tools_used:
        line += f"  used: {', '.join(item.answer.tools_used)}"
    return line


def render_trace(
    trace_id: str, records: Iterable[AuditRecord], *, now: datetime | None = None
) -> list[str]:
    """Lines drawing the tree of decisions of `trace_id`, then its session timeline.

    `now` tells a call whose deadline has passed without an answer (a timeout) from one that
    may still be answered; without it, neither is called a timeout.
    """
    kept: list[AuditRecord] = []
    events: list[AuditRecord] = []
    for record in records:
        if record.trace_id != trace_id:
            continue
        if record.fact == "decision":
            kept.append(record)
        elif record.fact == "session_event":
            events.append(record)
    decisions = decisions_by_envelope(kept)
    calls = {item.call.envelope_id: item for item in interactions(decisions)}
    folded = {
        item.answer.envelope_id: call_id
        for call_id, item in calls.items()
        if item.answer is not None
    }
    children: dict[str, list[AuditRecord]] = {}
    roots: list[AuditRecord] = []
    for record in sorted(decisions.values(), key=lambda r: (r.created_at, r.chain_index)):
        if record.envelope_id in folded:
            continue
        parent = folded.get(record.causation_id, record.causation_id)
        if parent in decisions:
            children.setdefault(parent, []).append(record)
        else:
            roots.append(record)
    lines = [f"trace {trace_id}: {len(decisions)} decision(s), {len(events)} session event(s)"]

    def draw(record: AuditRecord, prefix: str, last: bool) -> None:
        item = calls.get(record.envelope_id)
        shown = _call_line(item, now) if item is not None else _line(record)
        lines.append(f"{prefix}{'└─ ' if last else '├─ '}{shown}")
        kids = children.get(record.envelope_id, [])
        for i, kid in enumerate(kids):
            draw(kid, prefix + ("   " if last else "│  "), i == len(kids) - 1)

    for i, root in enumerate(roots):
        draw(root, "", i == len(roots) - 1)
    if events:
        lines.append("session timeline:")
        for event in sorted(events, key=lambda r: (r.created_at, r.chain_index)):
            turn = f" turn {event.turn_index}" if event.turn_index is not None else ""
            lines.append(f"  {event.created_at.isoformat()}  {event.status}{turn}  {event.profile}")
    return lines
