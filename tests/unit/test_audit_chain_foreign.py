"""A flood of foreign messages in the audit stream cannot make `verify` hold them all: the
first thousand are described, every one is counted, and the chain around them still holds."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from actors.auditor import ChainVerifier
from schemas import key_id

KEY = Ed25519PrivateKey.generate()


def test_foreign_messages_past_a_thousand_are_counted_not_described() -> None:
    verifier = ChainVerifier(trusted={key_id(KEY.public_key()): KEY.public_key()})
    for seq in range(1, 5001):
        verifier.feed(seq, "parley.audit.t.gpt", b'{"not":"a record"}')
    report = verifier.finish()
    assert report.foreign_total == 5000
    assert len(report.foreign) == 1000
    assert report.foreign[0].startswith("seq 1 on parley.audit.t.gpt")
    assert report.ok and report.records == 0
