"""From one fact (a gate decision, a session event) to the audit records it produces. Pure.

Who gets a record: a decision is the sender's (its `sender`, which the gate took from the
submit subject, never from a claim). An admitted envelope also concerns its target, which
gets its own copy on its own subject, so each profile's history is complete on its own
subject and a profile-scoped read never needs anyone else's. A refused envelope never reached
the target, and its objective is nobody's business but the sender's: no copy. A session event
belongs to its speaker, or, when it has none (the session started, stopped), to the profile
that runs sessions; an event that only tells a person what a decision says (a call between
agents, told by the gate) gets none, since its decision has its records already.

Every free-text field is redacted here, before the record exists; ids, codes and counters are
not free text. An answer's figures (outcome, tokens, duration, tools) are copied as the gate
recorded them, its error and the tool names it reports redacted like any text; a call's
context is in no decision, so it is in no record.

A record's id derives from its source (stream, sequence) and its profile, so the same fact
handled twice produces the same `Nats-Msg-Id` and JetStream stores it once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from actors.auditor._chain import ALERT_FACT, UNVOUCHED_FACT
from schemas import (
    TOLD_FROM_DECISION,
    AnyEnvelope,
    AuditRecord,
    Decision,
    SessionEvent,
    SubjectTokenError,
    check_token,
    derive_id,
    redact,
)

__all__ = (
    "ALERT_PROFILE",
    "FactSource",
    "Redactor",
    "alert_record",
    "records_for",
    "unvouched_record",
)

ALERT_PROFILE = "_alerts"
"""Where alerts about the chain itself go (`_` tokens are the auditor's, never a profile's)."""
_PREVIEW = 200
_TOOL_NAME = 64


@dataclass(frozen=True, slots=True)
class Redactor:
    """Which profiles' records lose PII as well as secrets, and the key of the markers."""

    key: bytes
    pii_profiles: frozenset[str] = frozenset({"*"})
    pii_kinds: frozenset[str] | None = None

    def __call__(self, profile: str, text: str, *, truncated: bool = False) -> str:
        if not text:
            return text
        pii = "*" in self.pii_profiles or profile in self.pii_profiles
        return redact(text, pii=pii, pii_kinds=self.pii_kinds, key=self.key, truncated=truncated)

    def preview(self, profile: str, text: str, limit: int = _PREVIEW) -> str:
        """A redacted preview that fits `limit` (a marker may make the text longer)."""
        cut = len(text) >= limit
        return self(profile, text[:limit], truncated=cut)[:limit]


@dataclass(frozen=True, slots=True)
class FactSource:
    """Where the fact was read: its stream and sequence are the record's identity."""

    stream: str
    seq: int
    trace_id: str
    hop_count: int
    causation_id: str
    origin: str
    at: datetime
    traceparent: str = ""
    """The fact's `traceparent` header when it is a well-formed W3C one, else empty."""


def _record_id(source: FactSource, profile: str) -> str:
    return derive_id(f"{source.stream}:{source.seq}", f"audit:{profile}")


def _profile(candidate: str | None, fallback: str) -> str:
    """A usable profile token; `_`-prefixed tokens are the auditor's own and never a profile."""
    if candidate and not candidate.startswith("_"):
        try:
            return check_token(candidate, "profile")
        except SubjectTokenError:
            pass
    return fallback


def _decision_records(
    decision: Decision, source: FactSource, tenant: str, redactor: Redactor
) -> list[AuditRecord]:
    owner = _profile(decision.sender, "_unknown")
    profiles = [owner]
    target = _profile(decision.target, "")
    if decision.allowed and target and target != owner:
        profiles.append(target)
    code = decision.code.value if decision.code is not None else "ALLOW"
    return [
        AuditRecord(
            id=_record_id(source, profile),
            created_at=decision.decided_at or decision.created_at,
            tenant=tenant,
            profile=profile,
            fact="decision",
            trace_id=decision.trace_id,
            hop_count=decision.hop_count,
            envelope_id=decision.envelope_id,
            decision_code=code,
            policy_version=decision.bundle_version,
            requester=decision.sender,
            target=decision.target,
            status="delivered" if decision.allowed else "rejected",
            failure_reason=_failure(decision, profile, redactor),
            duration_ms=decision.duration_ms,
            request_id=decision.request_id,
            origin=decision.origin,
            user_id=decision.user_id,
            objective=redactor(profile, decision.objective),
            task=decision.envelope_kind,
            output_preview=redactor.preview(profile, decision.preview),
            success=decision.allowed,
            source_stream=source.stream,
            source_seq=source.seq,
            session_id=decision.session_id,
            causation_id=decision.causation_id,
            outcome=decision.outcome,
            tokens=decision.tokens,
            tools=decision.tools,
            tools_used=tuple(
                redactor.preview(profile, name, _TOOL_NAME) for name in decision.tools_used
            ),
            deadline_at=decision.deadline_at,
            traceparent=source.traceparent,
        )
        for profile in profiles
    ]


def _failure(decision: Decision, profile: str, redactor: Redactor) -> str | None:
    """Why the gate refused the envelope, or why an admitted answer says its call failed."""
    if not decision.allowed:
        return redactor(profile, f"{decision.rule}: {decision.message}")
    if decision.reason:
        return redactor.preview(profile, decision.reason)
    return None


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _event_record(
    event: SessionEvent, source: FactSource, tenant: str, redactor: Redactor, runner: str
) -> AuditRecord:
    profile = _profile(event.speaker, runner)
    payload = event.payload
    stop = event.stop_reason
    return AuditRecord(
        id=_record_id(source, profile),
        created_at=event.created_at,
        tenant=tenant,
        profile=profile,
        fact="session_event",
        trace_id=source.trace_id,
        hop_count=source.hop_count,
        envelope_id=event.id,
        requester=redactor(profile, _str_or_none(payload.get("requester")) or ""),
        target=_str_or_none(payload.get("target")) or "",
        target_device_id=_str_or_none(payload.get("target_device_id")),
        turn_index=event.round,
        mode=_str_or_none(payload.get("mode")),
        status=event.event_type,
        failure_reason=redactor(profile, stop) if stop else None,
        duration_ms=_int_or_none(payload.get("duration_ms")),
        origin=source.origin,
        task=redactor(profile, _str_or_none(payload.get("task")) or ""),
        output_preview=redactor.preview(profile, _str_or_none(payload.get("preview")) or ""),
        success=payload.get("success") if isinstance(payload.get("success"), bool) else None,
        source_stream=source.stream,
        source_seq=source.seq,
        session_id=event.session_id,
        causation_id=source.causation_id,
        traceparent=source.traceparent,
    )


def records_for(
    envelope: AnyEnvelope,
    source: FactSource,
    *,
    tenant: str,
    redactor: Redactor,
    runner: str = "router",
) -> list[AuditRecord]:
    """The records one fact produces (none for kinds that are not audited facts)."""
    match envelope:
        case Decision():
            return _decision_records(envelope, source, tenant, redactor)
        case SessionEvent() if TOLD_FROM_DECISION in envelope.payload:
            return []  # the timeline's copy of a decision, which is recorded as itself
        case SessionEvent():
            return [_event_record(envelope, source, tenant, redactor, runner)]
        case _:
            return []


def alert_record(
    *, tenant: str, profile: str, detail: str, at: datetime, first_seq: int, last_seq: int
) -> AuditRecord:
    """The record the auditor appends when it finds messages in the stream it did not write."""
    return AuditRecord(
        id=derive_id(f"foreign:{first_seq}:{last_seq}", "audit:alert"),
        created_at=at,
        tenant=tenant,
        profile=profile,
        fact=ALERT_FACT,
        status="foreign_write",
        failure_reason=detail,
        success=False,
    )


def unvouched_record(*, tenant: str, first: int, last: int, at: datetime) -> AuditRecord:
    """The record a restarted auditor appends about records it pins without having seen
    them pinned by their writer: those just before a crash, or any appended while it was down.
    """
    return AuditRecord(
        id=derive_id(f"unvouched:{first}:{last}", "audit:alert"),
        created_at=at,
        tenant=tenant,
        profile=ALERT_PROFILE,
        fact=UNVOUCHED_FACT,
        status="unvouched",
        failure_reason=(
            f"records {first}..{last} were appended before a restart and pinned by no "
            "checkpoint of their writer; compare them with the off-box copies"
        ),
    )
