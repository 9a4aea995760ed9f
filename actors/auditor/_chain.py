"""The audit hash chain and its signed checkpoints: building, sealing and verifying. Pure.

A record's `hash` is the SHA-256 of its stored bytes with the hash value itself empty; its
`prev_hash` is the previous record's `hash` and its `chain_index` counts from 1. Because the
`hash` field is the last one msgspec writes, sealing only replaces the trailing `"hash":""`
of the encoded record, and checking blanks it again: the exact stored bytes are hashed, and
nothing is ever re-serialised to be checked (msgspec keeps the last of duplicate keys, so a
re-encoding could hide an edit).

The chain alone is not enough: anyone able to write the stream could rewrite every record
after an edit and recompute every hash. A checkpoint, signed with the auditor's Ed25519 key,
pins (count, last sequence, head hash) every N records or T seconds; copies of it in the
auditor's log live off the box, so even a truncated stream or a stream rebuilt wholesale
disagrees with a signature its rewriter cannot make.

A history with a retention (`retention.audit_s`, bus/_retention.py) loses its oldest records
to age. Its walk begins at the first message kept: a checkpoint there is verified and taken as
the head; a record there is taken on its own word (its index and `prev_hash`) and chained
forward, and the first signed checkpoint after it pins that whole stretch, so an edit in it
still breaks the walk. Only where the stream really has an age limit: a history kept for ever
that starts past its first record was truncated.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from schemas import AuditRecord, DecodeError, DsseEnvelope, DsseError, decode_envelope, sign_payload
from schemas import verify_payload as verify_dsse

__all__ = (
    "ALERT_FACT",
    "CHECKPOINT_PROFILE",
    "CHECKPOINT_TYPE",
    "GENESIS",
    "UNVOUCHED_FACT",
    "ChainError",
    "ChainReport",
    "ChainVerifier",
    "Checkpoint",
    "open_checkpoint",
    "seal",
    "sign_checkpoint",
)

GENESIS = ""
"""The `prev_hash` of the first record."""
CHECKPOINT_TYPE = "application/vnd.parley.audit-checkpoint+json"
ALERT_FACT = "chain_alert"
"""A record the auditor appends about messages in its stream that it did not write."""
UNVOUCHED_FACT = "chain_unvouched"
"""A record the auditor appends after a restart about records no checkpoint of their writer
pinned (written just before a crash, or by someone else while it was down)."""
CHECKPOINT_PROFILE = "_checkpoint"
"""The subject token checkpoints use in place of a profile (profiles never start with `_`)."""

_UNSEALED_TAIL = b',"hash":""}'
_SEALED = re.compile(rb',"hash":"([0-9a-f]{64})"\}')
_SEALED_LEN = len(b',"hash":""}') + 64
"""A sealed record ends with exactly these many bytes of hash field: only they are matched."""
_FOREIGN_KEPT = 1000
"""Foreign messages described in a report; the rest are counted (memory stays bounded)."""


class ChainError(ValueError):
    """Bytes that cannot be sealed (not an encoded record with an empty trailing hash)."""


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the auditor signs: the chain had `count` records, the last at `last_seq`."""

    tenant: str
    count: int
    last_seq: int
    head_hash: str
    at: datetime


_checkpoint_decoder = msgspec.json.Decoder(Checkpoint)
_dsse_decoder = msgspec.json.Decoder(DsseEnvelope)


def seal(unsealed: bytes) -> tuple[bytes, str]:
    """Return the record's stored bytes and its hash, from its encoding with `hash=""`.

    Raises:
        ChainError: `unsealed` does not end with an empty `hash` field.
    """
    if not unsealed.endswith(_UNSEALED_TAIL):
        raise ChainError("record bytes must end with an empty hash field")
    digest = hashlib.sha256(unsealed).hexdigest()
    return unsealed[:-2] + digest.encode() + b'"}', digest


def _computed_hash(stored: bytes) -> tuple[str, str] | None:
    """(claimed hash, hash of the bytes with it blanked), or None if not sealed."""
    cut = len(stored) - _SEALED_LEN
    match = _SEALED.fullmatch(stored, cut) if cut >= 0 else None
    if match is None:
        return None
    unsealed = stored[:cut] + _UNSEALED_TAIL
    return match.group(1).decode(), hashlib.sha256(unsealed).hexdigest()


def _claims_a_record(data: bytes) -> bool:
    """Whether sealed bytes say they are an audit record: a record altered in transit or at
    rest still does, and is then judged (and broken) as one."""
    return b'"audit_record"' in data


def sign_checkpoint(checkpoint: Checkpoint, key: Ed25519PrivateKey) -> bytes:
    """The DSSE envelope (JSON) the auditor publishes and logs for `checkpoint`."""
    return sign_payload(msgspec.json.encode(checkpoint), CHECKPOINT_TYPE, key)


def _canonical(data: bytes) -> bool:
    """Whether `data` is exactly how the auditor writes a DSSE envelope.

    JSON and base64 both have several spellings of the same value (key order, duplicate
    keys, padding bits), so a byte could be edited without changing what a lenient decoder
    sees; the auditor's own encoding is unique, so anything else is an edit.
    """
    try:
        envelope = _dsse_decoder.decode(data)
        parts = [envelope.payload, *(s.sig for s in envelope.signatures)]
        decoded = [base64.b64decode(part, validate=True) for part in parts]
    except (msgspec.DecodeError, binascii.Error, ValueError):
        return False
    return msgspec.json.encode(envelope) == data and all(
        base64.b64encode(raw).decode() == part for raw, part in zip(decoded, parts, strict=True)
    )


def open_checkpoint(data: bytes, trusted: dict[str, Ed25519PublicKey]) -> Checkpoint:
    """Verify a signed checkpoint, then decode it.

    Raises:
        DsseError: not signed by a trusted key, not in canonical form, or malformed.
    """
    if not _canonical(data):
        raise DsseError("malformed", "checkpoint bytes are not in the form the auditor writes")
    payload, _ = verify_dsse(data, CHECKPOINT_TYPE, trusted)
    try:
        return _checkpoint_decoder.decode(payload)
    except msgspec.DecodeError as exc:
        raise DsseError("malformed", f"not a checkpoint: {exc}") from None


@dataclass
class ChainReport:
    """What a walk over the audit stream found. `ok` only if nothing at all was wrong."""

    records: int = 0
    checkpoints: int = 0
    covered: int = 0
    """Records pinned by a verified checkpoint (the chain up to that index)."""
    alerts: int = 0
    """Alert records: the auditor found messages it did not write (they stay in the chain)."""
    foreign: list[str] = field(default_factory=list)
    """Messages that are no part of the chain (not a sealed audit record or checkpoint), by
    sequence and subject: someone else's writes, reported beside the chain, never in it.
    The first thousand only: `foreign_total` counts them all."""
    foreign_total: int = 0
    unvouched: list[str] = field(default_factory=list)
    """Ranges of records a restarted auditor pinned without having written them itself."""
    first_bad_seq: int | None = None
    problem: str = ""
    last_seq: int = 0
    expired: int = 0
    """Records before the first one kept, dropped by the stream's age limit (`retained`)."""

    @property
    def ok(self) -> bool:
        return self.first_bad_seq is None


@dataclass
class ChainVerifier:
    """Feed it every message of the audit stream in order; then call `finish()`.

    It streams: what it keeps is the head of the chain and counters, never the records, so
    its memory does not grow with the stream (off-box checkpoints given, and descriptions of
    the first foreign messages, are all it holds).

    Args:
        trusted: Public keys whose checkpoints count (by key id).
        off_box: Signed checkpoints kept elsewhere (the auditor's log), each of which must
            agree with the stream and be present in it.
        strict: Every record must be pinned by a checkpoint (after the auditor wrote its
            final one); otherwise an unpinned tail is reported in `covered` only.
        retained: The stream drops records past an age (module docstring): the walk may
            begin mid-chain, and off-box checkpoints older than its start are expired.
    """

    trusted: dict[str, Ed25519PublicKey]
    off_box: Iterable[bytes] = ()
    strict: bool = False
    retained: bool = False
    report: ChainReport = field(default_factory=ChainReport)
    _head: str = GENESIS
    _head_seq: int = 0
    _member_seq: int = 0
    _pins: dict[int, Checkpoint] = field(default_factory=dict)
    _seen_pins: set[int] = field(default_factory=set)
    """Off-box checkpoints found in the stream (only those: memory stays flat)."""
    _first_unpinned_seq: int = 0
    """Sequence of the first record after the newest checkpoint (what `strict` reports)."""

    def __post_init__(self) -> None:
        for raw in self.off_box:
            try:
                checkpoint = open_checkpoint(raw, self.trusted)
            except DsseError as exc:
                self._bad(0, f"off-box checkpoint does not verify: {exc}")
                continue
            self._pins[checkpoint.count] = checkpoint

    def _bad(self, seq: int, problem: str) -> None:
        if self.report.first_bad_seq is None:
            self.report.first_bad_seq = seq
            self.report.problem = problem

    def feed(self, seq: int, subject: str, data: bytes) -> None:
        """Check one stored message (`subject` is its full subject).

        A message that does not claim a place in the chain (on no record or checkpoint
        subject, not sealed, not an audit record at all) is foreign: reported, and skipped.
        Skipping one cannot hide tampering with the chain: a removed or altered record breaks
        the next record's `prev_hash`, or a checkpoint's count, head or coverage.
        """
        self.report.last_seq = seq
        tokens = subject.split(".")
        if len(tokens) != 4 or tokens[1] != "audit":
            self._foreign(seq, subject, "on no audit record subject")
        elif tokens[3] == CHECKPOINT_PROFILE:
            self._checkpoint(seq, tokens[2], data)
            self._member_seq = seq
        elif (hashes := _computed_hash(data)) is None or not _claims_a_record(data):
            self._foreign(seq, subject, "not a sealed audit record")
        else:
            self._record(seq, tokens[2], tokens[3], data, hashes)
            self._member_seq = seq

    def _foreign(self, seq: int, subject: str, why: str) -> None:
        self.report.foreign_total += 1
        if len(self.report.foreign) < _FOREIGN_KEPT:
            self.report.foreign.append(f"seq {seq} on {subject}: {why}")

    def _record(
        self, seq: int, tenant: str, profile: str, data: bytes, hashes: tuple[str, str]
    ) -> None:
        index = self.report.records + 1
        self.report.records = index
        if index == self.report.covered + 1:
            self._first_unpinned_seq = seq
        claimed, computed = hashes
        if claimed != computed:
            self._bad(seq, "record bytes do not match their hash (edited)")
        try:
            record = decode_envelope(data)
        except DecodeError as exc:
            self._bad(seq, f"record does not decode: {exc}")
            return
        if not isinstance(record, AuditRecord) or record.hash != claimed:
            self._bad(seq, "not an audit record, or a second hash field")
            return
        if self._starts_mid_chain(record.chain_index, index):
            # The records before it aged out: it stands in for them (module docstring).
            self.report.expired = record.chain_index - 1
            self._head, index = record.prev_hash, record.chain_index
            self.report.records = index
        if record.prev_hash != self._head:
            self._bad(seq, "prev_hash does not match the previous record (deleted/moved)")
        if record.chain_index != index:
            self._bad(seq, f"chain index {record.chain_index}, expected {index}")
        if (record.tenant, record.profile) != (tenant, profile):
            self._bad(seq, "record sits on another tenant's or profile's subject")
        if record.fact == UNVOUCHED_FACT:
            self.report.unvouched.append(record.failure_reason or "")
        if record.fact == ALERT_FACT:  # the chain holds, and says what was written into it
            self.report.alerts += 1
        self._head, self._head_seq = claimed, seq
        pin = self._pins.get(index)
        if pin is not None and (pin.head_hash != claimed or pin.last_seq != seq):
            self._bad(seq, f"off-box checkpoint {index} disagrees with the stored record")

    def _starts_mid_chain(self, claimed: int, expected: int) -> bool:
        """Whether the first message of the walk, claiming chain position `claimed` where
        `expected` was due, begins a history whose older records aged out."""
        return self.retained and self._member_seq == 0 and claimed > expected

    def _checkpoint(self, seq: int, tenant: str, data: bytes) -> None:
        self.report.checkpoints += 1
        try:
            checkpoint = open_checkpoint(data, self.trusted)
        except DsseError as exc:
            self._bad(seq, f"checkpoint does not verify ({exc.reason}): {exc}")
            return
        if checkpoint.tenant != tenant:
            self._bad(seq, "checkpoint sits on another tenant's subject")
        if self._starts_mid_chain(checkpoint.count, self.report.records):
            # Signed by the auditor: the head it pins is where the kept chain begins.
            self.report.expired = self.report.records = checkpoint.count
            self._head, self._head_seq = checkpoint.head_hash, checkpoint.last_seq
            self._member_seq = checkpoint.last_seq
        expected = (self.report.records, self._head_seq, self._head)
        if (checkpoint.count, checkpoint.last_seq, checkpoint.head_hash) != expected:
            self._bad(seq, f"checkpoint {checkpoint.count} disagrees with the chain before it")
            return
        if self._head_seq != self._member_seq:
            # The single writer appends a checkpoint right after the record it pins.
            self._bad(seq, f"checkpoint {checkpoint.count} does not follow the record it pins")
            return
        if checkpoint.count in self._pins:
            self._seen_pins.add(checkpoint.count)
        self.report.covered = max(self.report.covered, checkpoint.count)

    def finish(self) -> ChainReport:
        """Check what only the end can tell: truncation, missing checkpoints, coverage."""
        report = self.report
        for count in sorted(self._pins):
            pin = self._pins[count]
            if count > report.records:
                self._bad(
                    report.last_seq + 1,
                    f"truncated: a signed checkpoint counts {count} records, "
                    f"the stream holds {report.records}",
                )
                break
            if count <= report.expired:
                continue  # its records aged out with it
            if count not in self._seen_pins:
                self._bad(pin.last_seq, f"signed checkpoint {count} is missing from the stream")
                break
            report.covered = max(report.covered, count)
        if self.strict and report.covered < report.records:
            self._bad(
                self._first_unpinned_seq,
                f"records {report.covered + 1}..{report.records} are pinned by no checkpoint",
            )
        return report
