"""`parley audit verify` catches every one of 200 randomised tamperings.

A real auditor process writes a chain (records and signed checkpoints) and stops, leaving its
checkpoints in its log as the off-box copy. The stored messages are then read through an admin
connection and, for each tampering, copied into a fresh stream with one change made: a byte
edited, a message deleted, two swapped, one inserted (a copy, or a forgery chained to its
predecessor), the tail truncated, the chain rewritten after an edit (every hash recomputed),
or a checkpoint forged. The live stream itself denies deletes and purges, so a copy is how
an attacker with the store (or a backup) in hand would present an altered history. An
untouched copy must verify, so the verifier is known to be able to say yes.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import StorageType, StreamConfig

from actors.auditor._chain import CHECKPOINT_PROFILE, Checkpoint, seal, sign_checkpoint
from bus import EmbeddedServer, StoredMessage, read_history
from schemas import AuditRecord, Namespace, encode, key_id
from tests.support.audit import AuditorKeys, decision, publish_fact, start_auditor
from tests.support.processes import READY, REPO, parley_env
from tools.audit import read_off_box, verify_stream

Message = tuple[str, bytes]  # subject suffix after the namespace root, stored bytes
_records = msgspec.json.Decoder(AuditRecord)
_checkpoints = msgspec.json.Decoder(Checkpoint)


async def _records_stored(js: JetStreamContext, ns: Namespace, count: int) -> None:
    """Wait until the audit stream holds `count` records (checkpoints aside)."""
    sub = await js.subscribe(ns.wildcard("audit"), ordered_consumer=True)
    try:
        seen = 0
        while seen < count:
            msg = await sub.next_msg(timeout=20)
            seen += not msg.subject.endswith("." + CHECKPOINT_PROFILE)
    finally:
        await sub.unsubscribe()


def _is_checkpoint(message: Message) -> bool:
    return message[0].endswith("." + CHECKPOINT_PROFILE)


def _record_positions(messages: list[Message]) -> list[int]:
    return [i for i, m in enumerate(messages) if not _is_checkpoint(m)]


def _edit_byte(rng: random.Random, messages: list[Message]) -> list[Message]:
    i = rng.randrange(len(messages))
    subject, data = messages[i]
    j = rng.randrange(len(data))
    changed = bytes([(data[j] + rng.randrange(1, 256)) % 256])
    messages[i] = (subject, data[:j] + changed + data[j + 1 :])
    return messages


def _delete(rng: random.Random, messages: list[Message]) -> list[Message]:
    del messages[rng.randrange(len(messages))]
    return messages


def _swap(rng: random.Random, messages: list[Message]) -> list[Message]:
    i, j = rng.sample(range(len(messages)), 2)
    messages[i], messages[j] = messages[j], messages[i]
    return messages


def _insert_copy(rng: random.Random, messages: list[Message]) -> list[Message]:
    messages.insert(rng.randrange(len(messages) + 1), rng.choice(messages))
    return messages


def _insert_forgery(rng: random.Random, messages: list[Message]) -> list[Message]:
    """A well-formed record chained to the record before it, with the next index."""
    positions = _record_positions(messages)
    at = rng.choice(positions)
    before = _records.decode(messages[at][1])
    forged = msgspec.structs.replace(
        before, id=f"forged-{rng.random()}", status="delivered", success=True,
        chain_index=before.chain_index + 1, prev_hash=before.hash, hash="",
    )  # fmt: skip
    data, _ = seal(encode(forged))
    messages.insert(at + 1, (messages[at][0], data))
    return messages


def _truncate(rng: random.Random, messages: list[Message]) -> list[Message]:
    return messages[: len(messages) - rng.randint(1, 12)]


def _rechain(rng: random.Random, messages: list[Message]) -> list[Message]:
    """Edit one record, then recompute every hash after it, as a careful attacker would."""
    positions = _record_positions(messages)
    start = rng.choice(positions)
    previous = _records.decode(messages[start][1]).prev_hash
    for k, i in enumerate(p for p in positions if p >= start):
        record = _records.decode(messages[i][1])
        changes = {"objective": "nothing to see here"} if k == 0 else {}
        record = msgspec.structs.replace(record, prev_hash=previous, hash="", **changes)
        data, previous = seal(encode(record))
        messages[i] = (messages[i][0], data)
    return messages


def _forge_checkpoint(rng: random.Random, messages: list[Message]) -> list[Message]:
    """Replace a checkpoint with one the attacker signed (its own key), or one re-pointed."""
    positions = [i for i, m in enumerate(messages) if _is_checkpoint(m)]
    i = rng.choice(positions)
    attacker = Ed25519PrivateKey.generate()
    record_at = max(p for p in _record_positions(messages) if p < i)
    head = _records.decode(messages[record_at][1])
    claim = Checkpoint(
        tenant="demo", count=head.chain_index, last_seq=record_at + 1, head_hash=head.hash,
        at=head.created_at,
    )  # fmt: skip
    messages[i] = (messages[i][0], sign_checkpoint(claim, attacker))
    return messages


TAMPERINGS: dict[str, Callable[[random.Random, list[Message]], list[Message]]] = {
    "edit_byte": _edit_byte,
    "delete": _delete,
    "swap": _swap,
    "insert_copy": _insert_copy,
    "insert_forgery": _insert_forgery,
    "truncate": _truncate,
    "rechain": _rechain,
    "forge_checkpoint": _forge_checkpoint,
}


async def _copy(js: JetStreamContext, root: str, messages: list[Message]) -> str:
    """Publish `messages` into a fresh in-memory stream of namespace `root`; return its name."""
    ns = Namespace(root)
    stream = ns.stream("audit")
    await js.add_stream(
        StreamConfig(
            name=stream,
            subjects=[ns.wildcard("audit")],
            storage=StorageType.MEMORY,
            allow_direct=True,  # read back as the tools read it (bus/_history.py)
        )
    )
    futures = [await js.publish_async(f"{root}.{suffix}", data) for suffix, data in messages]
    for future in futures:
        await future
    return stream


def _cli(url: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools", *argv],
        env=parley_env(url, "parley"),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


def _suffix(message: StoredMessage) -> Message:
    return (message.subject.split(".", 1)[1], message.data)


async def test_two_hundred_random_tamperings_are_all_caught(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    js = nc.jetstream()
    keys = AuditorKeys(tmp_path)
    auditor = start_auditor(
        nats_server.url, namespace, keys, tmp_path, checkpoint_every=9, checkpoint_s=30
    )
    try:
        await auditor.wait_line(READY)
        for i in range(40):  # admitted calls are recorded twice, refusals once: 60 records
            await publish_fact(
                js, namespace, decision(f"p{i % 4}", f"p{(i + 1) % 4}", allowed=i % 2 == 0)
            )
        await auditor.wait_line(r'"count":54\b', timeout=20)
        # Stopped only once every fact is recorded (a fact not yet fetched would be left for
        # the next auditor); the final checkpoint then pins the last six records.
        await _records_stored(js, namespace, 60)
        auditor.signal(signal.SIGTERM)
        assert await auditor.wait_exit() == 0
    finally:
        auditor.close()
    off_box = read_off_box(auditor.lines)
    original = [_suffix(m) async for m in read_history(js, namespace.stream("audit"))]
    trusted = {key_id(keys.public): keys.public}
    assert sum(not _is_checkpoint(m) for m in original) == 60
    assert _is_checkpoint(original[-1])

    untouched = await _copy(js, f"{namespace.root}x", list(original))
    report = await verify_stream(js, untouched, trusted=trusted, off_box=off_box, strict=True)
    assert report.ok, report
    await js.delete_stream(untouched)

    # The command line on one tampered copy, with the auditor's log as the off-box copy.
    log = tmp_path / "auditor.log"
    log.write_text("\n".join(auditor.lines))
    cut = await _copy(js, f"{namespace.root}cli", original[:-1])  # the final checkpoint gone
    argv = ["audit", "verify", "--stream", cut, "--key", str(keys.public_path)]
    result = await asyncio.to_thread(_cli, nats_server.url, [*argv, "--checkpoints", str(log)])
    assert result.returncode == 1 and "BROKEN at seq" in result.stdout, result.stdout
    assert "missing from the stream" in result.stdout
    result = await asyncio.to_thread(_cli, nats_server.url, argv)  # no off-box copy: unpinned
    assert result.returncode == 0 and "intact" in result.stdout, result.stdout
    result = await asyncio.to_thread(_cli, nats_server.url, [*argv, "--strict"])
    assert result.returncode == 1 and "pinned by no checkpoint" in result.stdout, result.stdout
    # `parley up`'s output as the off-box copy: its lines are the auditor's, named. Read as
    # nothing, it left the cut unseen; a file of no checkpoint at all is refused, not ignored.
    shown = tmp_path / "up.log"
    other_child = '[gpt] {"checkpoint": "an agent\'s program printed this"}'  # not the auditor's
    shown.write_text("\n".join([other_child, *(f"[auditor] {line}" for line in auditor.lines)]))
    result = await asyncio.to_thread(_cli, nats_server.url, [*argv, "--checkpoints", str(shown)])
    assert result.returncode == 1 and "missing from the stream" in result.stdout, result.stdout
    whole = await _copy(js, f"{namespace.root}y", list(original))
    intact = ["audit", "verify", "--stream", whole, "--key", str(keys.public_path)]
    result = await asyncio.to_thread(_cli, nats_server.url, [*intact, "--checkpoints", str(shown)])
    compared = f"{len(off_box)} off-box checkpoints compared"
    assert result.returncode == 0 and compared in result.stdout, result.stdout
    await js.delete_stream(whole)
    empty = tmp_path / "nothing.log"
    empty.write_text("not a log of the auditor\n")
    result = await asyncio.to_thread(_cli, nats_server.url, [*argv, "--checkpoints", str(empty)])
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{empty} holds no checkpoint" in result.stderr, result.stderr

    rng = random.Random(6)  # noqa: S311 - reproducible tamperings, not key material
    missed: list[str] = []
    kinds = list(TAMPERINGS)
    for n in range(200):
        kind = kinds[n % len(kinds)]
        tampered = TAMPERINGS[kind](rng, list(original))
        stream = await _copy(js, f"{namespace.root}c{n}", tampered)
        report = await verify_stream(js, stream, trusted=trusted, off_box=off_box, strict=True)
        await js.delete_stream(stream)
        if report.ok or report.first_bad_seq is None:
            missed.append(kind)
    assert missed == []
