"""The causal tree of one trace, drawn from its audit records. Pure.

Each decision record names an envelope, what caused it and who sent it to whom; linking
`causation_id` to `envelope_id` rebuilds who called whom. A fact recorded for both its sender
and its target appears once (the sender's copy); session events hang under the trace as a
timeline of their own.
"""

from __future__ import annotations

from collections.abc import Iterable

from schemas import AuditRecord

__all__ = ("render_trace",)


def _line(record: AuditRecord) -> str:
    arrow = f"{record.requester} -> {record.target or '?'}"
    code = record.decision_code or ""
    verdict = record.status + (f" {code}" if code and code != "ALLOW" else "")
    extra = f"  ({record.failure_reason})" if record.failure_reason else ""
    when = record.created_at.strftime("%H:%M:%S.%f")[:-3]
    policy = f" policy v{record.policy_version}" if record.policy_version is not None else ""
    return f"{arrow}  {record.task}  hop {record.hop_count}  {verdict}{policy}  at {when}{extra}"


def render_trace(trace_id: str, records: Iterable[AuditRecord]) -> list[str]:
    """Lines drawing the tree of decisions of `trace_id`, then its session timeline."""
    decisions: dict[str, AuditRecord] = {}
    events: list[AuditRecord] = []
    for record in records:
        if record.trace_id != trace_id:
            continue
        if record.fact == "decision":
            kept = decisions.get(record.envelope_id)
            if kept is None or (
                kept.profile != kept.requester and record.profile == record.requester
            ):
                decisions[record.envelope_id] = record
        elif record.fact == "session_event":
            events.append(record)
    children: dict[str, list[AuditRecord]] = {}
    roots: list[AuditRecord] = []
    for record in sorted(decisions.values(), key=lambda r: (r.created_at, r.chain_index)):
        if record.causation_id in decisions:
            children.setdefault(record.causation_id, []).append(record)
        else:
            roots.append(record)
    lines = [f"trace {trace_id}: {len(decisions)} decision(s), {len(events)} session event(s)"]

    def draw(record: AuditRecord, prefix: str, last: bool) -> None:
        lines.append(f"{prefix}{'└─ ' if last else '├─ '}{_line(record)}")
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
