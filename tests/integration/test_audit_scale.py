"""`parley audit verify` streams: what it holds does not grow with the chain, and one edit
anywhere in a long chain is still found, at its own sequence.

Chains are written the way the auditor chains them (the `scale` bench row's writer: sealed
records, a signed checkpoint every 1,000) into streams of a real nats-server, and verified
through `verify_stream`, the command's own walk. Memory is what tracemalloc sees Python
allocate: what a verifier keeps once fed a chain, and the peak of a whole walk through a
stream, each compared across two lengths; speed is the bench's business, never asserted here.
"""

from __future__ import annotations

import tracemalloc

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import StorageType, StreamConfig

from actors.auditor import ChainVerifier
from schemas import Namespace, key_id
from tools.audit import verify_stream
from tools.bench._scale_audit import chain_messages, write_chain

KEY = Ed25519PrivateKey.generate()
TRUSTED = {key_id(KEY.public_key()): KEY.public_key()}
SHORT, LONG = 3_000, 30_000
KEPT_ALLOWED = 64 * 1024
"""Bytes a verifier that was fed the long chain may hold beyond one fed the short chain:
27,000 more records (35 MB of them) leave at most this (the decoder's bounded caches); the
verifier's per-record bookkeeping of old, eight bytes a record, alone held 216 KB more."""


async def _stream_of(js: JetStreamContext, root: str) -> str:
    """A fresh in-memory audit stream for namespace `root`, read back as the tools read it."""
    ns = Namespace(root)
    await js.add_stream(
        StreamConfig(
            name=ns.stream("audit"),
            subjects=[ns.wildcard("audit")],
            storage=StorageType.MEMORY,
            allow_direct=True,
        )
    )
    return ns.stream("audit")


def _held_after_feeding(count: int) -> int:
    """Bytes a verifier still holds once fed a chain of `count` records (and checkpoints)."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        verifier = ChainVerifier(trusted=TRUSTED, strict=True)
        messages = chain_messages(Namespace("parley"), count, KEY)
        for seq, message in enumerate(messages, start=1):
            verifier.feed(seq, message.subject, message.data)
        del messages
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    report = verifier.finish()
    assert report.ok and report.records == count and report.covered == count, report
    return held


def test_a_verifier_holds_as_much_after_thirty_thousand_records_as_after_three() -> None:
    _held_after_feeding(SHORT)  # first-use allocations (caches, interned names) are no growth
    held = {count: _held_after_feeding(count) for count in (SHORT, LONG)}
    assert held[LONG] - held[SHORT] < KEPT_ALLOWED, held


async def _peak_of_walk(js: JetStreamContext, stream: str, count: int) -> int:
    """Peak bytes Python allocated while the verify walked `stream`; checks it verified."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        report = await verify_stream(js, stream, trusted=TRUSTED, strict=True)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert report.ok and report.records == count and report.covered == count, report
    return peak


async def test_the_walk_of_a_long_stream_holds_a_few_batches_never_the_stream(
    nc: NATS, namespace: Namespace
) -> None:
    """The reader holds at most two batches of 1,024 (one being checked, the next arriving):
    its peak is the same for a short stream and one ten times as long, and a small part of
    what went through it."""
    js = nc.jetstream()
    peaks = {}
    for count in (SHORT, LONG):
        root = f"{namespace.root}n{count}"
        stream = await _stream_of(js, root)
        await write_chain(nc, Namespace(root), count, KEY)
        peaks[count] = await _peak_of_walk(js, stream, count)
        await js.delete_stream(stream)
    assert peaks[LONG] < 12 * 1024 * 1024, peaks  # 39 MB of records went through it
    assert peaks[LONG] - peaks[SHORT] < 1024 * 1024, peaks


def _seq_of(index: int) -> int:
    """Where record `index` is stored: after every record and checkpoint before it."""
    return index + (index - 1) // 1000


@pytest.mark.parametrize("edited", [1, 12_345, 20_000])
async def test_one_edit_anywhere_in_twenty_thousand_records_is_found_where_it_is(
    nc: NATS, namespace: Namespace, edited: int
) -> None:
    js = nc.jetstream()
    stream = await _stream_of(js, f"{namespace.root}e")

    def stored_as(index: int, sealed: bytes) -> bytes:
        return (
            sealed.replace(b'"status":"rejected"', b'"status":"delivered"')
            if index == edited
            else sealed
        )

    await write_chain(nc, Namespace(f"{namespace.root}e"), 20_000, KEY, stored_as=stored_as)
    report = await verify_stream(js, stream, trusted=TRUSTED, strict=True)
    assert not report.ok and report.first_bad_seq == _seq_of(edited), report
    assert "edited" in report.problem, report
    assert report.records == 20_000
