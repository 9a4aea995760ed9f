"""The `publish` rows of `parley bench`: three ways to store a batch of messages in a stream.

The gate stores four messages per envelope and, with lazy fsync, is bound by the CPU each
store costs (docs/benchmarks.md); most of that is one request out and one `PubAck` back per
message. nats-server 2.12+ offers two ways to store a batch for one answer, and these rows
measure both against one answer per message, in the same run, on the same server:

- `one-ack-each`: raw nats-py publishes with a reply subject each on one wildcard inbox (what
  bus/_ackinbox.py does), 64 in flight, every `PubAck` awaited.
- `atomic`: an atomic batch (`Nats-Batch-Id`, `Nats-Batch-Sequence`, `Nats-Batch-Commit`
  headers; the stream allows atomic publishes): no reply but on the commit, all or nothing.
- `fast`: a fast batch (the stream allows batched publishes): the batch's id, flow, gap mode,
  sequence and operation ride in each message's reply subject (`<inbox>.<batch id>.<flow>.
  fail.<sequence>.<operation>.$FI`), the server answers the commit with one `PubAck` and sends
  flow-control acks only every `flow` messages. Stored one by one as they arrive, not atomic.

Every message carries a `Nats-Msg-Id` and a trace header, as the gate's effects do. Each
row's count is checked against the stream's own after the run: a mode that stored fewer
would not count. CPU is this process's and the server's, per message stored.
"""

from __future__ import annotations

import asyncio
import json
import resource
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from bus import EmbeddedServer, scratch_directory
from tools.bench._cpu import Descendants

__all__ = ("MODES", "publish_rows")

BATCH = 64
MODES = ("one-ack-each", "atomic", "fast")
_PAYLOAD = b"x" * 300
_STREAM_OPTION = {
    "one-ack-each": {},
    "atomic": {"allow_atomic": True},
    "fast": {"allow_batched": True},
}


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Answers:
    """Futures for requests answered on one wildcard inbox, keyed by a token in the subject."""

    def __init__(self, nc: NATS) -> None:
        self.nc = nc
        self.inbox = nc.new_inbox()
        self._waiting: dict[str, asyncio.Future[bytes]] = {}
        self.flow_acks = 0

    async def start(self) -> None:
        await self.nc.subscribe(f"{self.inbox}.>", cb=self._on_answer)

    def expect(self, token: str) -> asyncio.Future[bytes]:
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._waiting[token] = future
        return future

    async def _on_answer(self, msg: Msg) -> None:
        token = msg.subject[len(self.inbox) + 1 :].split(".", 1)[0]
        if b'"stream"' not in msg.data and b'"error"' not in msg.data:
            self.flow_acks += 1  # a fast batch's flow control, not an answer
            return
        future = self._waiting.pop(token, None)
        if future is not None and not future.done():
            future.set_result(msg.data)


def _check(answer: bytes) -> None:
    if b'"error"' in answer:
        raise RuntimeError(f"the server refused a publish: {answer.decode()}")


async def _one_ack_each(answers: _Answers, subject: str, batch: int, run: str) -> None:
    futures = []
    for i in range(batch):
        token = f"{run}-{i}"
        futures.append(answers.expect(token))
        headers = {"Nats-Msg-Id": token, "Parley-Trace-Id": run}
        await answers.nc.publish(
            subject, _PAYLOAD, reply=f"{answers.inbox}.{token}", headers=headers
        )
    for answer in await asyncio.gather(*futures):
        _check(answer)


async def _atomic(answers: _Answers, subject: str, batch: int, run: str) -> None:
    answer = answers.expect(run)
    for i in range(1, batch + 1):
        headers = {
            "Nats-Msg-Id": f"{run}-{i}",
            "Parley-Trace-Id": run,
            "Nats-Batch-Id": run,
            "Nats-Batch-Sequence": str(i),
        }
        reply = ""
        if i == batch:
            headers["Nats-Batch-Commit"] = "1"
            reply = f"{answers.inbox}.{run}"
        await answers.nc.publish(subject, _PAYLOAD, reply=reply, headers=headers)
    _check(await answer)


async def _fast(answers: _Answers, subject: str, batch: int, run: str) -> None:
    answer = answers.expect(run)
    for i in range(1, batch + 1):
        operation = 0 if i == 1 else 2 if i == batch else 1  # start, append, commit
        reply = f"{answers.inbox}.{run}.{batch}.fail.{i}.{operation}.$FI"
        headers = {"Nats-Msg-Id": f"{run}-{i}", "Parley-Trace-Id": run}
        await answers.nc.publish(subject, _PAYLOAD, reply=reply, headers=headers)
    _check(await answer)


_PUBLISH: dict[str, Callable[[_Answers, str, int, str], Awaitable[None]]] = {
    "one-ack-each": _one_ack_each,
    "atomic": _atomic,
    "fast": _fast,
}


async def _stream(nc: NATS, name: str, mode: str) -> None:
    config = {"name": name, "subjects": [f"{name}.>"], "storage": "file", **_STREAM_OPTION[mode]}
    answer = await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(config).encode())
    _check(answer.data)


async def _stored(nc: NATS, name: str) -> int:
    answer = await nc.request(f"$JS.API.STREAM.INFO.{name}", b"")
    _check(answer.data)
    return int(json.loads(answer.data)["state"]["messages"])


async def _run(nc: NATS, server: Descendants, mode: str, batches: int) -> dict[str, float]:
    """Store `batches` batches one after the other in a stream of their own; rate and CPU."""
    name = f"BENCH_{mode.replace('-', '_').upper()}_{uuid.uuid4().hex[:8]}"
    await _stream(nc, name, mode)
    answers = _Answers(nc)
    await answers.start()
    publish = _PUBLISH[mode]
    own, cpu, started = _own_cpu_s(), server.cpu(), time.perf_counter()
    for index in range(batches):
        await publish(answers, f"{name}.m", BATCH, f"{name}{index}")
    elapsed = time.perf_counter() - started
    own, cpu = _own_cpu_s() - own, server.cpu() - cpu
    count = batches * BATCH
    stored = await _stored(nc, name)
    if stored != count:
        raise RuntimeError(f"{mode}: {stored} of {count} messages stored")
    await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"")
    return {
        "per_s": count / elapsed,
        "client_us": own / count * 1e6,
        "server_us": cpu.server_s / count * 1e6,
        "flow_acks_per_batch": answers.flow_acks / batches,
    }


async def _fsync_rows(sync_always: bool, rounds: int, batches: int) -> list[dict[str, Any]]:
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    with (
        scratch_directory("parley-bench-") as store,
        EmbeddedServer(Path(store), sync_always=sync_always) as server,
    ):
        processes = Descendants()
        nc = await nats.connect(server.url)
        try:
            for turn in range(rounds):
                order = MODES if turn % 2 == 0 else tuple(reversed(MODES))
                for mode in order:
                    runs[mode].append(await _run(nc, processes, mode, batches))
        finally:
            await nc.close()
    base = statistics.median(r["per_s"] for r in runs["one-ack-each"])
    rows = []
    for mode in MODES:
        row: dict[str, Any] = {
            "mode": mode,
            "fsync": "always" if sync_always else "lazy",
            **{key: statistics.median(r[key] for r in runs[mode]) for key in runs[mode][0]},
        }
        row["ratio"] = row["per_s"] / base
        rows.append(row)
    return rows


async def publish_rows(rounds: int, batches: int) -> list[dict[str, Any]]:
    """Each mode at fsync always and lazy, alternating within a server; medians of `rounds`."""
    return await _fsync_rows(True, rounds, batches) + await _fsync_rows(False, rounds, batches)
