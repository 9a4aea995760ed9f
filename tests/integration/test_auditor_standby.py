"""Auditor replicas: one holds the writer's lease and appends, the others stand by.

The standby takes over within the lease's bound when the holder is SIGKILLed mid-stream, and
every fact is recorded exactly once in an intact chain with no foreign-write alert. A holder
paused past its lease (SIGSTOP) and resumed cannot append after the takeover: the chain's
expectations refuse whatever it had already sent, shown deterministically through a relay
that holds its bytes back, and end to end with real processes.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlparse

import msgspec
import nats
from nats.aio.client import Client as NATS

from actors.auditor._appender import ChainAppender
from actors.auditor._chain import CHECKPOINT_PROFILE
from actors.auditor._facts import unvouched_record
from bus import MSG_ID, AppendRefused, EmbeddedServer, read_history
from schemas import AuditRecord, Namespace, encode, key_id, utc_now
from tests.support.audit import AuditorKeys, decision, start_auditor
from tests.support.processes import READY, REPO, ProcessOutput, parley_env
from tools.audit import read_off_box, verify_stream

_records = msgspec.json.Decoder(AuditRecord)
LEASE_S = 3.0
"""Three seconds, not one: the holder renews every `lease_s / 4`, and a loaded machine can
delay a live holder's renewal past a one-second lease, which a standby rightly takes over."""
BOUND_S = 1.4 * LEASE_S
"""A standby holds the lease within `lease_s` plus one look (`lease_s / 8`) of the last
renewal it saw, and the holder renews every `lease_s / 4` (actors/auditor/_lease.py)."""
SLACK_S = 3.0
"""For a loaded test machine: process scheduling, the log line's way to the test."""
TOOK = r'"msg":"took the writer\'s lease"'
STANDING_BY = r'"msg":"standing by'


def _auditor(
    url: str, ns: Namespace, keys: AuditorKeys, directory: Path, name: str
) -> ProcessOutput:
    return start_auditor(
        url, ns, keys, directory, name=name, checkpoint_s=0.3, ack_wait_s=1.0,
        extra=f"lease_s = {LEASE_S}\n",
    )  # fmt: skip


async def _publish(nc: NATS, ns: Namespace, numbers: range) -> None:
    """Refused calls: one record each, spread over three profiles."""
    js = nc.jetstream()
    futures = []
    for i in numbers:
        fact = decision(f"p{i % 3}", "x", allowed=False, objective=f"fact {i}")
        futures.append(
            await js.publish_async(
                ns.decisions(fact.sender), encode(fact), headers={MSG_ID: fact.id}
            )
        )
    await asyncio.gather(*futures)


def _holder(process: ProcessOutput) -> str:
    line = next(line for line in process.lines if re.search(TOOK, line))
    match = re.search(r'"holder":"([0-9a-f]+)"', line)
    assert match is not None, line
    return match.group(1)


async def _check_chain(
    nc: NATS, url: str, ns: Namespace, keys: AuditorKeys, facts: int, processes: list[ProcessOutput]
) -> list[AuditRecord]:
    """Every fact recorded exactly once, an intact and fully pinned chain, no alert."""
    js = nc.jetstream()
    stored = [m async for m in read_history(js, ns.stream("audit"))]
    records = [
        _records.decode(m.data) for m in stored if not m.subject.endswith(CHECKPOINT_PROFILE)
    ]
    sources = Counter(r.source_seq for r in records if r.fact == "decision")
    assert sorted(sources) == list(range(1, facts + 1)), "a fact is missing"
    assert max(sources.values()) == 1, "a fact was recorded twice"
    assert [r.chain_index for r in records] == list(range(1, len(records) + 1))
    assert not [r for r in records if r.fact == "chain_alert"], "a foreign-write alert"
    report = await verify_stream(
        js,
        ns.stream("audit"),
        trusted={key_id(keys.public): keys.public},
        off_box=read_off_box([line for p in processes for line in p.lines]),
        strict=True,
    )
    assert report.ok and report.alerts == 0 and not report.foreign, report
    verify = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tools", "audit", "verify", "--key", str(keys.public_path),
         "--namespace", ns.root],
        env=parley_env(url, ns.root),
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert verify.returncode == 0 and "intact" in verify.stdout, verify.stdout + verify.stderr
    return records


async def _until_recorded(process: ProcessOutput, count: int, timeout: float = 60) -> None:
    await process.wait_line(rf'"msg":"audit checkpoint","count":{count}\b', timeout=timeout)


async def test_the_standby_takes_over_within_the_bound_when_the_holder_is_killed(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    keys = AuditorKeys(tmp_path)
    total = 1200
    first = _auditor(nats_server.url, namespace, keys, tmp_path, "auditor-1")
    second = None
    try:
        await first.wait_line(READY)
        second = _auditor(nats_server.url, namespace, keys, tmp_path, "auditor-2")
        await second.wait_line(STANDING_BY)
        await _publish(nc, namespace, range(total // 2))
        await first.wait_line(r'"msg":"audit checkpoint","count":\d+\b', timeout=30)
        killed_at = time.monotonic()
        first.kill()  # mid-stream: most of the first half is not recorded yet
        await _publish(nc, namespace, range(total // 2, total))
        await second.wait_line(TOOK, timeout=BOUND_S + SLACK_S)
        took_s = time.monotonic() - killed_at
        assert took_s <= BOUND_S + SLACK_S, f"takeover after {took_s:.2f} s"
        await second.wait_line(READY)
        unvouched = int(any("pinning records written before" in line for line in second.lines))
        await _until_recorded(second, total + unvouched)
        second.signal(signal.SIGTERM)
        assert await second.wait_exit() == 0
        records = await _check_chain(nc, nats_server.url, namespace, keys, total, [first, second])
        assert len(records) == total + unvouched
    finally:
        first.close()
        if second is not None:
            second.close()


async def test_a_paused_holder_resumed_after_the_takeover_appends_nothing(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    keys = AuditorKeys(tmp_path)
    total = 900
    first = _auditor(nats_server.url, namespace, keys, tmp_path, "auditor-1")
    second = None
    try:
        await first.wait_line(READY)
        second = _auditor(nats_server.url, namespace, keys, tmp_path, "auditor-2")
        await second.wait_line(STANDING_BY)
        await _publish(nc, namespace, range(total // 3))
        await first.wait_line(r'"msg":"audit checkpoint","count":\d+\b', timeout=30)
        first.signal(signal.SIGSTOP)  # mid-stream, appends in flight
        await _publish(nc, namespace, range(total // 3, 2 * total // 3))
        await second.wait_line(TOOK, timeout=BOUND_S + SLACK_S)
        await second.wait_line(READY)
        unvouched = int(any("pinning records written before" in line for line in second.lines))
        await _until_recorded(second, 2 * total // 3 + unvouched)
        first.signal(signal.SIGCONT)
        # It finds its lease gone, appends nothing, and exits for its supervisor to restart.
        assert await first.wait_exit() != 0
        assert any("lease" in line and "taken over" in line for line in first.lines)
        await _publish(nc, namespace, range(2 * total // 3, total))
        await _until_recorded(second, total + unvouched)
        second.signal(signal.SIGTERM)
        assert await second.wait_exit() == 0
        await _check_chain(nc, nats_server.url, namespace, keys, total, [first, second])
        # Nothing of the first one's epoch after the second one's first message.
        epoch = _holder(second)
        stored = [m async for m in read_history(nc.jetstream(), namespace.stream("audit"))]
        since = next(i for i, m in enumerate(stored) if m.headers[MSG_ID].endswith(f"@{epoch}"))
        assert all(m.headers[MSG_ID].endswith(f"@{epoch}") for m in stored[since:])
    finally:
        first.close()
        if second is not None:
            second.close()


@asynccontextmanager
async def _relay(url: str, flowing: asyncio.Event) -> AsyncIterator[str]:
    """A TCP relay to the server whose client-to-server direction moves only while `flowing`
    is set: bytes a client sent while it is clear wait, as a paused process's would."""
    target = urlparse(url)

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gated: bool) -> None:
        try:
            while data := await reader.read(65536):
                if gated:
                    await flowing.wait()
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(target.hostname, target.port)
        await asyncio.gather(pump(reader, up_writer, True), pump(up_reader, writer, False))

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"nats://127.0.0.1:{port}"
    finally:
        server.close()


def _note(n: int) -> AuditRecord:
    return unvouched_record(tenant="demo", first=n, last=n, at=utc_now())


async def test_appends_sent_before_a_takeover_are_refused_after_it(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    """The old writer's pipeline reaches the server after its successor's first append: its
    first append expects an older last sequence, and the second one, whose expected sequence
    happens to be right, expects a predecessor of an epoch that is over. Neither lands."""
    stream = namespace.stream("audit")
    subject = namespace.audit("demo", "_alerts")
    flowing = asyncio.Event()
    flowing.set()
    async with _relay(nats_server.url, flowing) as relayed:
        old_nc = await nats.connect(relayed)
        try:
            old = ChainAppender(old_nc, old_nc.jetstream(), stream, epoch="old")
            await old.open()
            for n in (1, 2):
                await (await old.append_record(subject, _note(n), {}))
            flowing.clear()  # paused: what it sends now waits
            pending = [await old.append_record(subject, _note(n), {}) for n in (3, 4, 5)]
            new = ChainAppender(nc, nc.jetstream(), stream, epoch="new")
            await new.open()
            await (await new.append_record(subject, _note(6), {}))
            flowing.set()  # resumed
            outcomes = await asyncio.gather(*pending, return_exceptions=True)
            assert all(isinstance(o, AppendRefused) for o in outcomes), outcomes
            # The second one expected the right last sequence: only its epoch refused it.
            assert isinstance(outcomes[1], AppendRefused) and outcomes[1].err_code == 10070
            await (await new.append_record(subject, _note(7), {}))
        finally:
            await old_nc.close()
    stored = [m async for m in read_history(nc.jetstream(), stream)]
    assert [m.headers[MSG_ID].split("@")[1] for m in stored] == ["old", "old", "new", "new"]
    report = await verify_stream(nc.jetstream(), stream, trusted={})
    assert report.ok and report.records == 4 and not report.foreign, report


async def test_a_standby_stops_on_sigterm_and_a_clean_stop_hands_the_lease_over_at_once(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    """SIGTERM ends a standby as it ends any actor; a holder stopping cleanly gives the lease
    back after its final checkpoint, so a standby takes it without waiting out `lease_s`."""
    keys = AuditorKeys(tmp_path)
    holder = _auditor(nats_server.url, namespace, keys, tmp_path, "auditor-1")
    standbys: list[ProcessOutput] = []
    try:
        await holder.wait_line(READY)
        for name in ("auditor-2", "auditor-3"):
            standbys.append(_auditor(nats_server.url, namespace, keys, tmp_path, name))
            await standbys[-1].wait_line(STANDING_BY)
        standbys[1].signal(signal.SIGTERM)
        assert await standbys[1].wait_exit() == 0
        await _publish(nc, namespace, range(10))
        await _until_recorded(holder, 10)
        holder.signal(signal.SIGTERM)
        assert await holder.wait_exit() == 0
        # Taken as given back: a lease taken as expired names its holder as predecessor.
        _, took = await standbys[0].wait_line(TOOK, timeout=BOUND_S + SLACK_S)
        assert _holder(holder) not in took, "taken as expired, not as given back"
        await standbys[0].wait_line(READY)
        await _publish(nc, namespace, range(10, 20))
        await _until_recorded(standbys[0], 20)  # nothing unvouched: the holder pinned all
        standbys[0].signal(signal.SIGTERM)
        assert await standbys[0].wait_exit() == 0
        await _check_chain(nc, nats_server.url, namespace, keys, 20, [holder, *standbys])
    finally:
        holder.close()
        for process in standbys:
            process.close()
