"""The verifier on a history whose oldest records aged out (`retention.audit_s`): it starts at
the first message kept, and the signed checkpoints after it still catch an edit."""

from __future__ import annotations

import msgspec

from actors.auditor._chain import ChainReport, ChainVerifier, Checkpoint, seal, sign_checkpoint
from schemas import AuditRecord, encode
from tests.unit.test_audit_chain import AT, KEY, TRUSTED, _chain

_records = msgspec.json.Decoder(AuditRecord)


def _kept(
    messages: list[tuple[str, bytes]], first: int, *, retained: bool = True, **kwargs: object
) -> ChainReport:
    """Verify the stream from its message `first` (1-based), sequences as stored."""
    verifier = ChainVerifier(trusted=TRUSTED, retained=retained, **kwargs)  # type: ignore[arg-type]
    for seq, (subject, data) in enumerate(messages, start=1):
        if seq >= first:
            verifier.feed(seq, subject, data)
    return verifier.finish()


def _off_box(messages: list[tuple[str, bytes]]) -> list[bytes]:
    return [data for subject, data in messages if subject.endswith("._checkpoint")]


def test_a_walk_from_a_record_past_the_start_verifies_and_counts_what_aged_out() -> None:
    messages = _chain(12)  # records 1-3, checkpoint 3 at seq 4, records 4-6, ...
    report = _kept(messages, 6, strict=True, off_box=_off_box(messages))  # from record 5
    assert report.ok, report
    assert (report.expired, report.records, report.covered) == (4, 12, 12)


def test_a_walk_from_a_checkpoint_takes_its_head() -> None:
    messages = _chain(9)
    report = _kept(messages, 4, strict=True)  # seq 4 is the checkpoint of record 3
    assert report.ok, report
    assert (report.expired, report.records, report.covered) == (3, 9, 9)


def test_a_forged_first_record_kept_breaks_the_walk() -> None:
    messages = _chain(9)
    subject, data = messages[5]  # record 5, the first kept
    record = _records.decode(data)
    forged = msgspec.structs.replace(record, fact="forged", hash="")
    messages[5] = (subject, seal(encode(forged))[0])
    report = _kept(messages, 6)
    assert not report.ok and report.first_bad_seq == 7, report  # record 6 links to the real one


def test_a_stretch_rewritten_up_to_a_checkpoint_breaks_it() -> None:
    messages = _chain(9)
    head = ""
    for position in (5, 6):  # records 5 and 6, re-chained from a made-up start
        subject, data = messages[position]
        record = msgspec.structs.replace(
            _records.decode(data), fact="rewritten", prev_hash=head or "0" * 64, hash=""
        )
        sealed, head = seal(encode(record))
        messages[position] = (subject, sealed)
    report = _kept(messages, 6)
    assert not report.ok and "checkpoint 6 disagrees" in report.problem, report


def test_a_history_kept_for_ever_that_starts_past_its_first_record_was_truncated() -> None:
    report = _kept(_chain(9), 6, retained=False)
    assert not report.ok and "prev_hash" in report.problem, report


def test_an_off_box_checkpoint_still_kept_must_agree() -> None:
    messages = _chain(9)
    aged = Checkpoint(tenant="t", count=3, last_seq=4, head_hash="0" * 64, at=AT)
    kept = Checkpoint(tenant="t", count=6, last_seq=8, head_hash="0" * 64, at=AT)
    # Checkpoint 3 aged out with its records: not checked. Checkpoint 6 is kept, and disagrees.
    report = _kept(messages, 6, off_box=[sign_checkpoint(aged, KEY)])
    assert report.ok, report
    report = _kept(messages, 6, off_box=[sign_checkpoint(kept, KEY)])
    assert not report.ok and "off-box checkpoint 6 disagrees" in report.problem, report
