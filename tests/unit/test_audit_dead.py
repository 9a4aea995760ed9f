"""A dead letter's audit record: who, why, where from, the payload's digest, never its bytes."""

from __future__ import annotations

import hashlib

from actors.auditor._dead_letters import DETAIL_LIMIT, DeadLetter, dead_letter_record
from actors.auditor._facts import Redactor
from bus import (
    DEAD_ACTOR,
    DEAD_ATTEMPT,
    DEAD_DETAIL,
    DEAD_REASON,
    DEAD_SEQ,
    DEAD_STREAM,
    DEAD_SUBJECT,
    DEAD_TRUNCATED,
    TRACE_ID,
)
from schemas import decode_envelope, encode, utc_now

REDACT = Redactor(key=b"k")
# Built at run time so no credential-shaped string is committed.
SECRET = "sk-ant-api03-" + "Qw7rT2" * 14
PAYLOAD = f'{{"kind":"agent_call","text":"use {SECRET}"'.encode()


def _letter(
    headers: dict[str, str], subject: str = "t1.dead.gate", payload: bytes = PAYLOAD
) -> DeadLetter:
    return DeadLetter(subject=subject, stream="T1_DEAD", seq=77, headers=headers, payload=payload)


def _runtime_headers(**overrides: str) -> dict[str, str]:
    """The headers bus/_deadletter.py writes on a dead letter."""
    headers = {
        DEAD_REASON: "decode_malformed",
        DEAD_DETAIL: f"JSON is malformed near {SECRET}",
        DEAD_STREAM: "T1_SUBMIT",
        DEAD_SEQ: "12",
        DEAD_SUBJECT: "t1.submit.gpt",
        DEAD_ATTEMPT: "1",
        DEAD_ACTOR: "gate",
        TRACE_ID: "0b5c1d2e-0000-8000-8000-000000000001",
    }
    headers.update(overrides)
    return headers


def test_a_runtime_dead_letter_is_recorded_under_its_actor_with_its_source() -> None:
    record = dead_letter_record(
        _letter(_runtime_headers()), tenant="demo", redactor=REDACT, at=utc_now()
    )
    assert (record.fact, record.profile, record.tenant) == ("dead_letter", "gate", "demo")
    assert (record.status, record.success) == ("decode_malformed", False)
    assert (record.source_stream, record.source_seq) == ("T1_SUBMIT", 12)
    assert (record.source_subject, record.attempt) == ("t1.submit.gpt", 1)
    assert record.trace_id == "0b5c1d2e-0000-8000-8000-000000000001"
    assert record.payload_bytes == len(PAYLOAD)
    assert record.payload_sha256 == hashlib.sha256(PAYLOAD).hexdigest()
    assert record.failure_reason is not None
    assert record.failure_reason.startswith("JSON is malformed near [REDACTED:anthropic_key:")


def test_the_payload_and_secrets_in_headers_never_reach_the_record() -> None:
    headers = _runtime_headers(**{DEAD_SUBJECT: f"t1.submit.{SECRET}", TRACE_ID: SECRET})
    record = dead_letter_record(_letter(headers), tenant="demo", redactor=REDACT, at=utc_now())
    stored = encode(record)
    assert SECRET.encode() not in stored and PAYLOAD not in stored
    assert b"Qw7rT2Qw7rT2" not in stored  # not even a piece of it
    assert isinstance(decode_envelope(stored), type(record))


def test_the_same_dead_letter_twice_is_one_record_and_another_profile_another() -> None:
    headers = _runtime_headers()
    first = dead_letter_record(_letter(headers), tenant="demo", redactor=REDACT, at=utc_now())
    again = dead_letter_record(_letter(headers), tenant="demo", redactor=REDACT, at=utc_now())
    assert first.id == again.id
    forged = dead_letter_record(
        _letter(headers, subject="t1.dead.mallory"), tenant="demo", redactor=REDACT, at=utc_now()
    )
    assert forged.profile == "mallory" and forged.id != first.id


def test_a_letter_claiming_anothers_source_does_not_take_its_record_id() -> None:
    """The id is the letter's own PARLEY_DEAD position: a forged letter published first with
    the same claimed source and name cannot make the real one look like its duplicate."""
    headers = _runtime_headers()
    real = dead_letter_record(_letter(headers), tenant="demo", redactor=REDACT, at=utc_now())
    forged_letter = _letter(headers)
    forged_letter = DeadLetter(
        forged_letter.subject,
        forged_letter.stream,
        forged_letter.seq + 1,
        forged_letter.headers,
        b"harmless",
    )
    forged = dead_letter_record(forged_letter, tenant="demo", redactor=REDACT, at=utc_now())
    assert (forged.source_stream, forged.source_seq) == (real.source_stream, real.source_seq)
    assert forged.id != real.id


def test_the_subject_names_the_profile_not_the_claimed_actor() -> None:
    headers = _runtime_headers(**{DEAD_ACTOR: "gate"})
    record = dead_letter_record(
        _letter(headers, subject="t1.dead.gpt"), tenant="demo", redactor=REDACT, at=utc_now()
    )
    assert record.profile == "gpt"
    for subject in ("t1.dead.GPT", "t1.dead._alerts", "t1.dead."):
        odd = dead_letter_record(
            _letter(headers, subject=subject), tenant="demo", redactor=REDACT, at=utc_now()
        )
        assert odd.profile == "_unknown", subject


def test_headers_that_do_not_fit_become_defaults_never_errors() -> None:
    headers = {
        DEAD_REASON: "Bad Reason!",
        DEAD_STREAM: "T1 SUBMIT",
        DEAD_SEQ: "abc",
        DEAD_ATTEMPT: "-1",
        TRACE_ID: "a\r\nb",
        DEAD_DETAIL: "x" * 5000,
    }
    record = dead_letter_record(_letter(headers), tenant="demo", redactor=REDACT, at=utc_now())
    assert record.status == "unknown" and record.attempt is None and record.trace_id == ""
    assert (record.source_stream, record.source_seq) == ("T1_DEAD", 77)  # its own position
    assert record.failure_reason is not None and len(record.failure_reason) <= DETAIL_LIMIT
    bare = dead_letter_record(
        _letter({}, payload=b""), tenant="demo", redactor=REDACT, at=utc_now()
    )
    assert (bare.status, bare.failure_reason, bare.payload_bytes) == ("unknown", "", 0)
    assert bare.payload_sha256 == hashlib.sha256(b"").hexdigest()


def test_a_cut_payload_is_hashed_as_stored_and_its_original_size_said() -> None:
    headers = _runtime_headers(**{DEAD_TRUNCATED: "9000000"})
    record = dead_letter_record(_letter(headers), tenant="demo", redactor=REDACT, at=utc_now())
    assert record.payload_bytes == len(PAYLOAD)
    assert record.failure_reason is not None
    assert record.failure_reason.endswith("(payload cut from 9000000 bytes)")
