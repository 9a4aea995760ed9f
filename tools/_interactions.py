"""Agents calling agents, as the audit history records them: each call with its answer. Pure.

The gate records one decision per envelope (actors/gate/_decisions.py). A delegation or a
sub-agent call is therefore two records: the call's (who asked whom, what, the tools granted,
the deadline) and its answer's (a `delegation_response`, a `sub_agent_result`, or an `error`
about the call, whose `causation_id` is the call's envelope id), with seed 003's and 004's
figures: status, tokens, duration, tools used. Only those figures and a short preview are
recorded, never a call's context. `parley trace` draws a call and its answer as one line, and
`parley calls` lists them in seed 004's words; both pair them here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from schemas import AuditRecord

__all__ = (
    "ANSWER_KINDS",
    "CALL_MODES",
    "Interaction",
    "Verdict",
    "decisions_by_envelope",
    "interactions",
    "seconds",
    "verdict",
)

CALL_MODES: Final = {"delegation_request": "delegation", "sub_agent_call": "sub-agent"}
"""The envelope kinds of agents calling agents, and what the views call each."""
ANSWER_KINDS: Final = frozenset({"delegation_response", "sub_agent_result", "error"})


def decisions_by_envelope(records: Iterable[AuditRecord]) -> dict[str, AuditRecord]:
    """One decision record per envelope: an admitted envelope is recorded for its sender and
    its target, with the same figures; the sender's copy is kept."""
    kept: dict[str, AuditRecord] = {}
    for record in records:
        if record.fact != "decision":
            continue
        found = kept.get(record.envelope_id)
        if found is None or (
            found.profile != found.requester and record.profile == record.requester
        ):
            kept[record.envelope_id] = record
    return kept


@dataclass(frozen=True, slots=True)
class Interaction:
    """One call of an agent to another, and the answer recorded for it (if any yet)."""

    call: AuditRecord
    answer: AuditRecord | None
    shape: str = ""
    """`fan-out` when a sibling call (same cause) was open at the same time, `chain` when it
    has siblings but each began after the one before had its answer, else empty."""

    @property
    def mode(self) -> str:
        return CALL_MODES.get(self.call.task, self.call.task)

    @property
    def refused(self) -> bool:
        return self.call.status == "rejected"

    @property
    def ended(self) -> datetime | None:
        """When the call stopped being open: its refusal, its answer, or None (still open)."""
        if self.refused:
            return self.call.created_at
        return self.answer.created_at if self.answer is not None else None


def _answer_for(call: AuditRecord, candidates: list[AuditRecord]) -> AuditRecord | None:
    """The answer the gate admitted for `call` (or, if it admitted none, the first it
    refused): from the callee, caused by the call."""
    mine = [r for r in candidates if r.requester == call.target]
    admitted = [r for r in mine if r.status != "rejected"]
    shown = admitted or mine
    return shown[0] if shown else None


def _overlaps(one: Interaction, other: Interaction) -> bool:
    one_end, other_end = one.ended, other.ended
    return (other_end is None or one.call.created_at <= other_end) and (
        one_end is None or other.call.created_at <= one_end
    )


def interactions(decisions: Mapping[str, AuditRecord]) -> list[Interaction]:
    """Every delegation and sub-agent call among `decisions` (one record per envelope, as
    `decisions_by_envelope` gives), paired with its answer, in the order they were made."""
    ordered = sorted(decisions.values(), key=lambda r: (r.created_at, r.chain_index))
    answers: dict[str, list[AuditRecord]] = {}
    for record in ordered:
        if record.task in ANSWER_KINDS and record.causation_id:
            answers.setdefault(record.causation_id, []).append(record)
    paired = [
        Interaction(call, _answer_for(call, answers.get(call.envelope_id, [])))
        for call in ordered
        if call.task in CALL_MODES
    ]
    siblings: dict[tuple[str, str], list[Interaction]] = {}
    for item in paired:
        if item.call.causation_id:
            siblings.setdefault((item.call.trace_id, item.call.causation_id), []).append(item)
    shaped = []
    for item in paired:
        group = siblings.get((item.call.trace_id, item.call.causation_id), [item])
        others = [other for other in group if other is not item]
        shape = ""
        if others:
            shape = "fan-out" if any(_overlaps(item, other) for other in others) else "chain"
        shaped.append(Interaction(item.call, item.answer, shape))
    return shaped


def seconds(ms: int) -> str:
    """Seed 004's `2s`, with a tenth of a second where it tells something."""
    return f"{ms / 1000:.1f}".removesuffix(".0") + "s"


def _ms(start: datetime, end: datetime) -> int:
    return max(0, round((end - start).total_seconds() * 1000))


@dataclass(frozen=True, slots=True)
class Verdict:
    """How a call ended, in seed 004's words: `SUCCESS` and the figures in brackets."""

    status: str
    """SUCCESS, PARTIAL, FAILED, TIMEOUT or REFUSED."""
    detail: str
    at: datetime
    """When it was settled: the answer's (or the refusal's) time, or the deadline's."""

    def __str__(self) -> str:
        return f"{self.status} ({self.detail})" if self.detail else self.status


def _refusal(record: AuditRecord) -> str:
    """`CODE: message` of a refusal (the record says `rule: message`)."""
    reason = record.failure_reason or ""
    rule, colon, message = reason.partition(": ")
    shown = message if colon and rule.isidentifier() else reason
    code = record.decision_code or ""
    return f"{code}: {shown}" if code and shown else code or shown


def _figures(call: AuditRecord, answer: AuditRecord) -> str:
    took = answer.duration_ms
    if took is None:
        took = _ms(call.created_at, answer.created_at)
    parts = [f"{answer.tokens} tokens"] if answer.tokens is not None else []
    parts.append(seconds(took))
    figures = ", ".join(parts)
    if answer.outcome != "success" and answer.failure_reason:
        return f"{figures}; {answer.failure_reason}"
    return figures


def verdict(item: Interaction, now: datetime | None = None) -> Verdict | None:
    """How `item` ended, or None while it may still be answered (no answer, and its deadline
    not known to have passed by `now`)."""
    call, answer = item.call, item.answer
    if item.refused:
        return Verdict("REFUSED", _refusal(call), call.created_at)
    deadline = call.deadline_at
    if answer is None:
        if deadline is not None and now is not None and now >= deadline:
            limit = seconds(_ms(call.created_at, deadline))
            return Verdict("TIMEOUT", f"no answer within its {limit} deadline", deadline)
        return None
    if answer.status == "rejected":
        return Verdict("REFUSED", f"its answer was refused: {_refusal(answer)}", answer.created_at)
    if deadline is not None and answer.created_at > deadline:
        took = seconds(_ms(call.created_at, answer.created_at))
        limit = seconds(_ms(call.created_at, deadline))
        said = (answer.outcome or "an answer").upper()
        detail = f"answered {said} after {took}, past its {limit} deadline"
        return Verdict("TIMEOUT", detail, answer.created_at)
    status = (answer.outcome or "unknown").upper()
    return Verdict(status, _figures(call, answer), answer.created_at)
