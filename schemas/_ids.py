"""Envelope ids and timestamps.

Root envelopes get a UUIDv7 (time-ordered, so stream order and id order agree and ids sort in
logs). An effect of another envelope gets an id *derived* from its cause: a handler that runs
twice after a crash then produces the same id, and JetStream's `Nats-Msg-Id` de-duplication
drops the second copy. That is the half of exactly-once effects that lives in the wire format.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from datetime import UTC, datetime

__all__ = ("derive_id", "new_id", "utc_now")


def new_id() -> str:
    """Return a fresh UUIDv7 string (RFC 9562): 48 bits of Unix milliseconds, then randomness."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80 | rand & ((1 << 80) - 1)
    value = value & ~(0xF << 76) | 0x7 << 76  # version 7
    value = value & ~(0x3 << 62) | 0x2 << 62  # RFC 4122 variant
    return str(uuid.UUID(int=value))


def derive_id(cause_id: str, purpose: str) -> str:
    """Return the deterministic id of the effect `purpose` of envelope `cause_id`.

    A UUIDv8 (RFC 9562 custom) built from SHA-256, so it looks like every other id on the wire
    but is the same each time a redelivered envelope is handled again.
    """
    raw = bytearray(hashlib.sha256(f"{cause_id}\x00{purpose}".encode()).digest()[:16])
    raw[6] = raw[6] & 0x0F | 0x80  # version 8
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 4122 variant
    # Formatted here rather than by `uuid.UUID`, whose checks cost more than the hash: the
    # gate derives two ids for every envelope it admits.
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def utc_now() -> datetime:
    """Return the current time as an aware UTC datetime (encoded as RFC 3339 on the wire)."""
    return datetime.now(UTC)
