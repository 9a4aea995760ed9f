"""From one dead letter to its audit record. Pure.

A dead letter (bus/_deadletter.py) is the bad message itself, kept with `Parley-Dead-*`
headers saying who gave up on it, why, where it was read and on which delivery. Its record is
filed under the actor that dead-lettered it, taken from the subject's last token
(`parley.dead.<sender>.<actor>`, which the broker lets each actor publish only as itself, and
the gate for the senders of what it reads and the receivers whose deliveries it moves), never
from the `Parley-Dead-Actor` claim.

The payload is whatever came in, secrets included, so the record never holds it: only its size
and SHA-256, which anyone allowed to read PARLEY_DEAD can check the stored bytes against. Every
header is a claim of whoever published the original or the dead letter, so each is checked,
bounded, and redacted when it is free text; a header that does not fit becomes a default, never
an error: an unparseable dead letter is still audited, it just says less.

The record's id derives from the dead letter's own position in PARLEY_DEAD, which nobody but
the server assigns, so a dead letter handled twice (a restarted auditor) is recorded once. The
claimed source (stream, sequence) is data only: were it the id, an agent could publish a
harmless letter claiming the source of one of its own deliveries and have the real dead letter
of that delivery (filed under the same name by the gate) dropped as its duplicate.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from actors.auditor._facts import Redactor, _profile
from bus import (
    DEAD_ATTEMPT,
    DEAD_DETAIL,
    DEAD_REASON,
    DEAD_SEQ,
    DEAD_STREAM,
    DEAD_SUBJECT,
    DEAD_TRUNCATED,
    TRACE_ID,
)
from schemas import AuditRecord, derive_id

__all__ = ("DEAD_LETTER_FACT", "DETAIL_LIMIT", "DeadLetter", "dead_letter_record")

DEAD_LETTER_FACT = "dead_letter"
DETAIL_LIMIT = 300
"""Characters of the dead letter's detail kept in the record (after redaction)."""
_UNKNOWN_PROFILE = "_unknown"
_REASON = re.compile(r"[a-z0-9_]{1,64}")
_STREAM = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_SUBJECT_LIMIT = 256


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead letter as read from PARLEY_DEAD: where it is, its headers, its bytes."""

    subject: str
    stream: str
    seq: int
    headers: Mapping[str, str]
    payload: bytes


def _count(raw: str | None, *, low: int) -> int | None:
    """A header's non-negative integer, or None if it is not one."""
    if raw is None or not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        return None
    value = int(raw)
    return value if value >= low else None


def _source(letter: DeadLetter) -> tuple[str, int]:
    """(stream, sequence) of the message that was dead-lettered, or the letter's own."""
    stream = letter.headers.get(DEAD_STREAM, "")
    seq = _count(letter.headers.get(DEAD_SEQ), low=1)
    if _STREAM.fullmatch(stream) and seq is not None:
        return stream, seq
    return letter.stream, letter.seq


def _detail(letter: DeadLetter, profile: str, redactor: Redactor) -> str:
    detail = redactor.preview(profile, letter.headers.get(DEAD_DETAIL, ""), DETAIL_LIMIT)
    original = _count(letter.headers.get(DEAD_TRUNCATED), low=0)
    if original is not None:
        # Said here rather than in `payload_bytes`, which must match the stored bytes' hash.
        detail = f"{detail} (payload cut from {original} bytes)".lstrip()
    return detail


def dead_letter_record(
    letter: DeadLetter, *, tenant: str, redactor: Redactor, at: datetime
) -> AuditRecord:
    """The record of one dead letter: who gave up on what, why, and the payload's digest."""
    token = letter.subject.rsplit(".", 1)[-1]
    profile = _profile(token, _UNKNOWN_PROFILE)
    stream, seq = _source(letter)
    headers = letter.headers
    reason = headers.get(DEAD_REASON, "")
    trace = headers.get(TRACE_ID, "")
    subject = headers.get(DEAD_SUBJECT, "")[:_SUBJECT_LIMIT]
    return AuditRecord(
        id=derive_id(f"dead:{letter.stream}:{letter.seq}", f"audit:{profile}"),
        created_at=at,
        tenant=tenant,
        profile=profile,
        fact=DEAD_LETTER_FACT,
        trace_id=redactor(profile, trace) if _ID.fullmatch(trace) else "",
        status=reason if _REASON.fullmatch(reason) else "unknown",
        failure_reason=_detail(letter, profile, redactor),
        success=False,
        source_stream=stream,
        source_seq=seq,
        source_subject=redactor(profile, subject),
        attempt=_count(headers.get(DEAD_ATTEMPT), low=0),
        payload_bytes=len(letter.payload),
        payload_sha256=hashlib.sha256(letter.payload).hexdigest(),
    )
