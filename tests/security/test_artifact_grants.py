"""Attack: principals holding only their own credentials reach for the artifact store.

Under the least-privilege config the tool runtime stores an artifact and the operator's
`artifacts-cli` reads it back (by direct gets, as `parley artifacts get` does). Then an agent
(`gpt`) and a person (`cli`), each with its own credentials only, try to read the stored
metadata and chunks and to write a chunk and a metadata record of their own; `artifacts-cli`
tries to write and delete. Every attempt is refused by the broker and the store is as it was.
The runtime's own grants suffice to delete the chunks of a write its quota refused, and to
count each person's share of the store in its `tool_runs` bucket, which no agent or person
can write nor read there.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any

import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from prometheus_client import CollectorRegistry

from actors.tools import (
    ArtifactShareExceeded,
    ArtifactStore,
    ArtifactStoreError,
    ArtifactUri,
    stored_bytes,
)
from bus import ActorMetrics, Payer, Shares
from tests.support.lockdown import LockedDown, violations
from tools.natsconf import ARTIFACT_READER, IMPORTED_JS_API, TOOLS

_REFUSED = (TimeoutError, NatsTimeoutError, NoRespondersError)


async def test_only_the_runtime_writes_and_only_the_reader_reads_artifacts(
    locked_down: LockedDown,
) -> None:
    locked, ns = locked_down, locked_down.ns
    locked.tune("provisioner", quotas="{ bucket_bytes = { artifacts = 1048576 } }")
    await locked.provision()
    tools = await locked.connect(TOOLS)
    reader = await locked.connect(ARTIFACT_READER)
    registries = {name: CollectorRegistry() for name in ("gpt", "cli")}
    attackers = {
        name: await locked.connect(name, ActorMetrics(registry, name))
        for name, registry in registries.items()
    }
    bucket = ns.bucket("artifacts")
    runs_bucket = ns.bucket("tool_runs")
    stream = f"OBJ_{bucket}"
    try:
        runs = await tools.jetstream().key_value(ns.bucket("tool_runs"))
        shares = Shares(runs, per_person=2000, per_agent=1 << 30, retention_s=3600)
        written = ArtifactStore(tools.jetstream(), ns, "demo", shares=shares)
        alice = [Payer("person", "alice"), Payer("agent", "gpt")]
        text = await written.put_bytes(
            "s1", b"secret build log\n", name="log.txt", step_id="1", payers=alice
        )
        with pytest.raises(ArtifactShareExceeded):  # counted with the runtime's grants alone
            await written.put_bytes("s1", b"z" * 900, name="z", step_id="1b", payers=alice)
        uri = ArtifactUri.parse(text)
        readable = ArtifactStore(locked.js(reader, ARTIFACT_READER), ns, "")
        assert await readable.get(uri) == b"secret build log\n"
        assert await readable.list("s1") == [uri]
        before = (await tools.jetstream().stream_info(stream)).state.messages
        # Past its quota a write is refused and its chunks deleted, with the runtime's grants.
        with pytest.raises(ArtifactStoreError):
            await written.put_bytes(
                "s1", os.urandom(1536 * 1024), name="big", step_id="2", payers=alice[1:]
            )
        assert (await tools.jetstream().stream_info(stream)).state.messages == before

        for name, nc in attackers.items():
            js = nc.jetstream(prefix=IMPORTED_JS_API, timeout=1)
            refused: list[Coroutine[Any, Any, object]] = [
                js.get_msg(stream, seq=1, direct=True),  # a chunk, by sequence
                js.get_msg(stream, subject=f"$O.{bucket}.M.>", seq=1, next=True, direct=True),
                js.get_msg(stream, seq=1),  # the non-direct form
                js.publish(f"$O.{bucket}.C.mine", b"planted", timeout=1),
                js.publish(f"$O.{bucket}.M.bWluZQ==", b"{}", timeout=1),
                js.stream_info(stream),
                # Nor the shares' counts: neither its own nor another's, to free room.
                js.publish(f"$KV.{runs_bucket}.usage.person.alice", b"{}", timeout=1),
                js.publish(f"$KV.{runs_bucket}.usage.person.{name}", b"{}", timeout=1),
                js.get_msg(
                    f"KV_{runs_bucket}",
                    subject=f"$KV.{runs_bucket}.usage.person.alice",
                    direct=True,
                ),
            ]
            outcomes = await asyncio.gather(*refused, return_exceptions=True)
            assert all(isinstance(o, _REFUSED) for o in outcomes), (name, outcomes)
            await nc.flush()
            assert violations(registries[name], name) >= len(refused), name

        own = locked.js(reader, ARTIFACT_READER)
        writes: list[Coroutine[Any, Any, object]] = [
            own.publish(f"$O.{bucket}.C.mine", b"planted", timeout=1),
            own.delete_msg(stream, 1),
            own.purge_stream(stream),
        ]
        outcomes = await asyncio.gather(*writes, return_exceptions=True)
        assert all(isinstance(o, _REFUSED) for o in outcomes), outcomes
        assert (await tools.jetstream().stream_info(stream)).state.messages == before
        assert await readable.get(uri) == b"secret build log\n"
        assert await shares.used(alice[0]) == stored_bytes(len(b"secret build log\n"), 1 << 17)
    finally:
        for nc in (tools, reader, *attackers.values()):
            await nc.close()
