"""Batched last-message reads (bus/_last_values.py) against a real server's KV stream."""

from __future__ import annotations

import pytest
from nats.aio.client import Client as NATS

from bus import HistoryError, LastValues
from schemas import Namespace


async def test_the_last_value_of_each_subject_in_one_read(nc: NATS, namespace: Namespace) -> None:
    bucket = namespace.bucket("idempotency")
    kv = await nc.jetstream().key_value(bucket)
    for n in range(300):  # more than one request's worth of subjects
        await kv.put(f"id.k{n}", b"first")
    await kv.put("id.k7", b"second")
    await kv.delete("id.k8")
    last = LastValues(nc)
    await last.open()
    wanted = [f"$KV.{bucket}.id.k{n}" for n in range(301)]  # k300 never written
    found = await last.read(f"KV_{bucket}", [*wanted, wanted[0]])
    assert set(found) == set(wanted) - {f"$KV.{bucket}.id.k8", f"$KV.{bucket}.id.k300"}
    assert found[f"$KV.{bucket}.id.k7"].data == b"second"
    assert found[f"$KV.{bucket}.id.k9"].data == b"first"
    assert await last.read(f"KV_{bucket}", [f"$KV.{bucket}.id.none"]) == {}


async def test_a_refused_read_is_an_error_not_an_empty_answer(
    nc: NATS, namespace: Namespace
) -> None:
    last = LastValues(nc)
    await last.open()
    with pytest.raises(HistoryError, match="503"):
        await last.read(namespace.stream("submit"), ["x"], timeout=2)  # no direct gets: 503
