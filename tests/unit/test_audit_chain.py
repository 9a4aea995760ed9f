"""The pure audit core: which records a fact makes, sealing, checkpoints, the verifier."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from actors.auditor._chain import (
    CHECKPOINT_PROFILE,
    GENESIS,
    ChainError,
    ChainVerifier,
    Checkpoint,
    open_checkpoint,
    seal,
    sign_checkpoint,
)
from actors.auditor._facts import FactSource, Redactor, records_for, unvouched_record
from schemas import AuditRecord, DsseError, HumanMessage, encode, key_id
from tests.support.audit import decision, session_event
from tools._tracetree import render_trace

_records = msgspec.json.Decoder(AuditRecord)
KEY = Ed25519PrivateKey.generate()
TRUSTED = {key_id(KEY.public_key()): KEY.public_key()}
AT = datetime(2026, 11, 22, tzinfo=UTC)
SOURCE = FactSource("PARLEY_EVENTS", 7, "trace-1", 1, "cause-1", "cli", AT)
REDACT = Redactor(key=b"k")


def _chain(count: int, checkpoint_every: int = 3) -> list[tuple[str, bytes]]:
    """(subject, bytes) of a chain as the auditor writes it, checkpoints included."""
    out: list[tuple[str, bytes]] = []
    head, head_seq = GENESIS, 0
    for index in range(1, count + 1):
        record = AuditRecord(
            id=f"r{index}", created_at=AT, tenant="t", profile="gpt", fact="decision",
            chain_index=index, prev_hash=head,
        )  # fmt: skip
        data, head = seal(encode(record))
        out.append(("parley.audit.t.gpt", data))
        head_seq = len(out)
        if index % checkpoint_every == 0 or index == count:
            claim = Checkpoint(tenant="t", count=index, last_seq=head_seq, head_hash=head, at=AT)
            out.append((f"parley.audit.t.{CHECKPOINT_PROFILE}", sign_checkpoint(claim, KEY)))
    return out


def _verify(messages: list[tuple[str, bytes]], **kwargs: object) -> ChainVerifier:
    verifier = ChainVerifier(trusted=TRUSTED, **kwargs)  # type: ignore[arg-type]
    for seq, (subject, data) in enumerate(messages, start=1):
        verifier.feed(seq, subject, data)
    verifier.finish()
    return verifier


def test_an_intact_chain_verifies_and_is_pinned() -> None:
    report = _verify(_chain(10), strict=True).report
    assert report.ok and (report.records, report.covered, report.checkpoints) == (10, 10, 4)


def test_seal_needs_the_empty_trailing_hash() -> None:
    with pytest.raises(ChainError):
        seal(b'{"hash":"x"}')


def test_an_edited_record_is_reported_at_its_sequence() -> None:
    messages = _chain(6)
    subject, data = messages[2]
    messages[2] = (subject, data.replace(b'"fact":"decision"', b'"fact":"decisioN"'))
    report = _verify(messages).report
    assert not report.ok and report.first_bad_seq == 3 and "edited" in report.problem


def test_a_record_on_another_profiles_subject_is_caught() -> None:
    messages = _chain(4)
    messages[0] = ("parley.audit.t.claude", messages[0][1])
    assert "another tenant" in _verify(messages).report.problem


def test_a_checkpoint_signed_by_another_key_is_caught() -> None:
    messages = _chain(3)
    claim = msgspec.json.decode(
        msgspec.json.encode(open_checkpoint(messages[-1][1], TRUSTED)), type=Checkpoint
    )
    messages[-1] = (messages[-1][0], sign_checkpoint(claim, Ed25519PrivateKey.generate()))
    report = _verify(messages).report
    assert not report.ok and "unknown_key" in report.problem


def test_a_checkpoint_respelled_without_changing_its_meaning_is_still_an_edit() -> None:
    data = _chain(3)[-1][1]
    respelled = data.replace(b'{"payloadType"', b'{ "payloadType"')
    with pytest.raises(DsseError):
        open_checkpoint(respelled, TRUSTED)


def test_truncation_needs_the_off_box_copy_or_strict_mode() -> None:
    full = _chain(9)
    off_box = [data for subject, data in full if subject.endswith(CHECKPOINT_PROFILE)]
    cut = full[:-3]  # the last two records and their checkpoint
    assert _verify(cut).report.ok  # nothing in the stream itself says it was longer
    assert "truncated" in _verify(cut, off_box=off_box).report.problem
    assert "pinned by no checkpoint" in _verify(full[:-1], strict=True).report.problem


def test_an_admitted_call_is_recorded_for_both_ends_and_a_refused_one_for_its_sender() -> None:
    admitted = records_for(decision("gpt", "claude"), SOURCE, tenant="t", redactor=REDACT)
    refused = records_for(
        decision("gpt", "claude", allowed=False), SOURCE, tenant="t", redactor=REDACT
    )
    assert [r.profile for r in admitted] == ["gpt", "claude"]
    assert len({r.id for r in admitted}) == 2
    assert [(r.profile, r.status, r.decision_code) for r in refused] == [
        ("gpt", "rejected", "TARGET_NOT_ALLOWED")
    ]


def test_the_same_fact_gives_the_same_record_ids() -> None:
    fact = decision("gpt", "claude")
    first = records_for(fact, SOURCE, tenant="t", redactor=REDACT)
    again = records_for(fact, SOURCE, tenant="t", redactor=REDACT)
    assert [r.id for r in first] == [r.id for r in again]


def test_session_events_belong_to_the_speaker_or_the_runner() -> None:
    spoke = records_for(session_event("s1", "step_completed", "gpt"), SOURCE, tenant="t",
                        redactor=REDACT)  # fmt: skip
    started = records_for(session_event("s1", "session_started"), SOURCE, tenant="t",
                          redactor=REDACT, runner="router")  # fmt: skip
    assert [r.profile for r in spoke + started] == ["gpt", "router"]
    assert spoke[0].trace_id == "trace-1" and spoke[0].session_id == "s1"


def test_reserved_and_invalid_profiles_never_become_subjects() -> None:
    fake = decision("gpt", "_checkpoint")
    assert [r.profile for r in records_for(fake, SOURCE, tenant="t", redactor=REDACT)] == ["gpt"]


def test_a_secret_cut_by_the_preview_limit_is_redacted() -> None:
    preview = ("x" * 188 + " sk-proj-a1b2c3d4e5f6")[:200]
    (record,) = records_for(
        decision("gpt", "claude", allowed=False, preview=preview), SOURCE, tenant="t",
        redactor=REDACT,
    )  # fmt: skip
    assert "sk-proj" not in record.output_preview and len(record.output_preview) <= 200


def test_pii_only_for_the_profiles_named() -> None:
    only_claude = Redactor(key=b"k", pii_profiles=frozenset({"claude"}))
    fact = decision("gpt", "claude", objective="ask bob@example.com")
    gpt, claude = records_for(fact, SOURCE, tenant="t", redactor=only_claude)
    assert "bob@example.com" in gpt.objective and "bob@example.com" not in claude.objective


def test_other_kinds_are_not_facts() -> None:
    message = HumanMessage(id="h", created_at=AT, text="hi", call_id="c")
    assert records_for(message, SOURCE, tenant="t", redactor=REDACT) == []


def test_the_trace_tree_follows_causation() -> None:
    call = decision("gpt", "claude", trace_id="tr")
    sub = decision(
        "claude", "researcher", trace_id="tr", causation_id=call.envelope_id, hop_count=2
    )
    answer = decision("researcher", "claude", trace_id="tr", causation_id=sub.envelope_id)
    records = [
        r
        for fact in (call, sub, answer)
        for r in records_for(fact, SOURCE, tenant="t", redactor=REDACT)
    ]
    lines = render_trace("tr", records)
    assert lines[0].startswith("trace tr: 3 decision(s)")
    assert lines[1].startswith("└─ gpt -> claude")
    assert lines[2].startswith("   └─ claude -> researcher") and "hop 2" in lines[2]
    assert lines[3].startswith("      └─ researcher -> claude")


def test_an_unvouched_range_is_reported_but_does_not_break_the_chain() -> None:
    messages = _chain(2, checkpoint_every=5)[:-1]  # two records, their checkpoint lost
    note = msgspec.structs.replace(
        unvouched_record(tenant="t", first=1, last=2, at=AT),
        chain_index=3,
        prev_hash=_records.decode(messages[-1][1]).hash,
    )
    data, head = seal(encode(note))
    messages.append(("parley.audit.t._alerts", data))
    claim = Checkpoint(tenant="t", count=3, last_seq=3, head_hash=head, at=AT)
    messages.append((f"parley.audit.t.{CHECKPOINT_PROFILE}", sign_checkpoint(claim, KEY)))
    report = _verify(messages, strict=True).report
    assert report.ok and report.covered == 3
    assert len(report.unvouched) == 1 and "records 1..2" in report.unvouched[0]
