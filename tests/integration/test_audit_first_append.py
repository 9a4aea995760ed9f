"""The audit chain's first append refused (as while the stream has no leader): the head the
writer predicted for it is forgotten, so the next record still starts the chain."""

from __future__ import annotations

import pytest
from nats.aio.client import Client as NATS

from actors.auditor._appender import ChainAppender
from actors.auditor._facts import unvouched_record
from bus import AppendRefused, read_history
from schemas import AuditRecord, Namespace, utc_now
from tools.audit import verify_stream


def _note(n: int) -> AuditRecord:
    return unvouched_record(tenant="demo", first=n, last=n, at=utc_now())


async def test_a_refused_first_append_leaves_the_chain_at_its_start(
    nc: NATS, namespace: Namespace
) -> None:
    js = nc.jetstream()
    stream = namespace.stream("audit")
    appender = ChainAppender(nc, js, stream, epoch="e1")
    await appender.open()
    # No stream listens there: refused `503`, as an append is while the stream elects.
    refused = await appender.append_record(f"{namespace.root}.nowhere.demo", _note(1), {})
    with pytest.raises(AppendRefused):
        await refused
    await (await appender.append_record(namespace.audit("demo", "_alerts"), _note(2), {}))
    stored = [m async for m in read_history(js, stream)]
    assert len(stored) == 1
    report = await verify_stream(js, stream, trusted={})
    assert report.ok and report.records == 1, report
