"""Audit records carry the `traceparent` of the fact they record; a chain whose older records
were written before the field existed still verifies."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from actors.auditor._chain import GENESIS, ChainVerifier, Checkpoint, seal, sign_checkpoint
from actors.auditor._facts import FactSource, Redactor, records_for
from bus import TRACEPARENT, traceparent_for, well_formed_traceparent
from schemas import AuditRecord, encode, key_id, new_id
from tests.support.audit import decision

KEY = Ed25519PrivateKey.generate()
AT = datetime(2026, 11, 28, tzinfo=UTC)
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_decisions_records_carry_its_traceparent() -> None:
    fact = decision("gpt", "claude")
    source = FactSource("PARLEY_EVENTS", 3, fact.trace_id, 1, "", "cli", AT, traceparent=PARENT)
    records = records_for(fact, source, tenant="t", redactor=Redactor(key=b"k"))
    assert [(r.profile, r.traceparent) for r in records] == [("gpt", PARENT), ("claude", PARENT)]


def test_only_a_well_formed_w3c_traceparent_is_kept() -> None:
    assert well_formed_traceparent({TRACEPARENT: PARENT}) == PARENT
    made = traceparent_for(new_id(), new_id())
    assert well_formed_traceparent({TRACEPARENT: made}) == made
    for bad in (
        "",
        PARENT.upper(),
        PARENT + "-00",
        "01" + PARENT[2:],
        PARENT.replace("b7ad6b7169203331", "0" * 16),
        PARENT.replace("0af7651916cd43dd8448eb211c80319c", "0" * 32),
        PARENT.replace("-", "_"),
        "00-" + "g" * 32 + "-b7ad6b7169203331-01",
    ):
        assert well_formed_traceparent({TRACEPARENT: bad}) == "", bad
    assert well_formed_traceparent(None) == ""


def test_a_chain_of_records_from_before_and_after_the_field_verifies() -> None:
    """The first two records are stored as an auditor without the field wrote them (their
    bytes have no `traceparent` at all); the next two carry one. The verifier hashes the
    stored bytes, so both kinds chain, and both decode."""
    messages: list[tuple[str, bytes]] = []
    head = GENESIS
    for index in range(1, 5):
        record = AuditRecord(
            id=f"r{index}", created_at=AT, tenant="t", profile="gpt", fact="decision",
            chain_index=index, prev_hash=head, traceparent=PARENT if index > 2 else "",
        )  # fmt: skip
        unsealed = encode(record)
        if index <= 2:
            unsealed = unsealed.replace(b',"traceparent":""', b"")
            assert b"traceparent" not in unsealed
        data, head = seal(unsealed)
        messages.append(("parley.audit.t.gpt", data))
    claim = Checkpoint(tenant="t", count=4, last_seq=4, head_hash=head, at=AT)
    messages.append(("parley.audit.t._checkpoint", sign_checkpoint(claim, KEY)))

    verifier = ChainVerifier(trusted={key_id(KEY.public_key()): KEY.public_key()}, strict=True)
    for seq, (subject, data) in enumerate(messages, start=1):
        verifier.feed(seq, subject, data)
    verifier.finish()
    assert verifier.report.ok, verifier.report
    assert (verifier.report.records, verifier.report.covered) == (4, 4)
    decoded = [msgspec.json.decode(data, type=AuditRecord) for _, data in messages[:4]]
    assert [r.traceparent for r in decoded] == ["", "", PARENT, PARENT]
