"""The sessions figure's floor: how fast the stores a session makes go without Parley.

Issue 35's thousand-sessions aim asks for a rate of work, not a cost per session: when a
thousand sessions think for about two seconds a turn, every store their turns need must be
made within their think time, or turns queue and the added time grows. Each store Parley
makes there is fsynced (`sync_interval: always`) and most carry a guarantee (an id decided
once, a position, a delivery, a decision, a session's compare-and-set, its events, an audit
record). So the figure counts them, and measures what they cost on this machine alone:

- `stream_sequences` before and after the small wave: each stream's last sequence, so the
  difference over the wave's sessions is the writes one session makes in each stream (a
  key-value overwrite counts; audit records trailing the warm-up's end are counted in, and
  the wave's own trailing ones left out; heartbeats and leases, made per second, not per
  session, are a few of them);
- `floor_sessions_per_s`: the same number of writes to each stream, on a server of their own
  with nothing else running (`sync_interval: always`, the namespace provisioned as Parley's),
  from one process a core, hundreds awaiting at once: no envelope, no check, no order
  between a session's writes, each on a subject of its own, of the stream's average stored
  size; fast batches where the stream takes them, sent by Parley's fast-batch sender
  (bus/_fastbatch.py) as its runtime sends its effects there, plain nats-py publishes
  elsewhere;
- `stores_since` over the large wave: the writes a second Parley itself made there, up to
  its last session's end (the auditor's records still trailing it left out);
- `sessions_per_s_asked`: the least rate at which the large wave's sessions must be carried
  for its median added time per turn to meet the aim.

The floor is a reference, not a proof: a client in another language, or one batching
differently, may store faster. When it is below what is asked and Parley stores about as fast
as it, the stores the guarantees make are what stop the aim on this machine, not the work
Parley does beside them.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass

import nats
from nats.js import JetStreamContext

from bus import owned_argv, python_command
from bus._ackinbox import AckInbox
from bus._fastbatch import FastBatcher
from schemas import Namespace

__all__ = (
    "StreamStores",
    "floor_sessions_per_s",
    "run_publisher",
    "session_stores",
    "sessions_per_s_asked",
    "stores_since",
    "stream_sequences",
)

_IN_FLIGHT = 256
"""Single publishes each floor process keeps awaiting at once: enough that the server, not
the client's round trips, sets the rate (more moved nothing on the 2-core machine)."""
_BATCH = 64
"""Messages of a fast batch, on a stream that takes them."""
_BATCHES_IN_FLIGHT = 4
"""Fast batches each floor process keeps awaiting at once."""
_PUBLISHERS = os.cpu_count() or 2
"""One process a core."""
_UNKNOWN_SIZE = 512
"""Bytes of a write to a stream that keeps none to average (a work queue read empty): about an
envelope's."""
_RUN_PUBLISHER = "import asyncio, sys; from tools.bench._store_floor import run_publisher; " + (
    "asyncio.run(run_publisher(sys.argv[1], sys.argv[2]))"
)
_START_TIMEOUT_S = 30.0
_RUN_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class StreamStores:
    """What one session stores in one stream: how many writes, of about what size."""

    stream: str
    subject: str
    """One subject of the stream's, its wildcards to be filled with fresh tokens."""
    per_session: float
    size: int
    batched: bool = False
    """The stream takes fast batches, as Parley's runtime sends its effects there."""


async def stream_sequences(js: JetStreamContext) -> dict[str, tuple[int, int, int]]:
    """Every stream's last sequence, bytes and messages, by name."""
    return {
        info.config.name or "": (
            info.state.last_seq,
            info.state.bytes,
            info.state.messages,
        )
        for info in await js.streams_info()
    }


async def session_stores(
    js: JetStreamContext, before: Mapping[str, tuple[int, int, int]], sessions: int
) -> list[StreamStores]:
    """The stores `sessions` sessions made in each stream since `before`, per session."""
    stores: list[StreamStores] = []
    for info in await js.streams_info():
        name = info.config.name or ""
        written = info.state.last_seq - before.get(name, (0, 0, 0))[0]
        if written <= 0 or not info.config.subjects:
            continue
        kept = info.state.messages
        size = info.state.bytes // kept if kept else _UNKNOWN_SIZE
        stores.append(
            StreamStores(
                stream=name,
                subject=info.config.subjects[0],
                per_session=written / sessions,
                size=min(max(size, 16), 8192),
                batched=bool(info.config.allow_batched),
            )
        )
    return stores


async def stores_since(js: JetStreamContext, before: Mapping[str, tuple[int, int, int]]) -> int:
    """Every write to every stream since `before`."""
    return round(sum(s.per_session for s in await session_stores(js, before, 1)))


def moved(text: str, source: Namespace, target: Namespace) -> str:
    """A stream name or subject of `source`'s, as `target`'s (streams upper-case the root)."""
    text = text.replace(source.stream_prefix, target.stream_prefix)
    return re.sub(rf"(^|[._]){re.escape(source.root)}(?=[._]|$)", rf"\g<1>{target.root}", text)


def sessions_per_s_asked(
    many: int, think_totals_s: list[float], rounds: int, few_added_ms: float, aim_ratio: float
) -> float:
    """The least rate of sessions a second that lets the median added time per turn of
    `many` sessions, all submitted at once, stay within `aim_ratio` times `few_added_ms`.

    The median meets the aim when half of the sessions end within their think time and
    `rounds` turns of the allowed added time. The half that asks least is the half that
    thinks most; each of its sessions must have ended, every store of it made, by its own
    deadline, so by each deadline the sessions due then must have been carried: the rate
    asked is the most of (sessions due by a deadline) / that deadline."""
    allowance_s = rounds * aim_ratio * few_added_ms / 1000
    half = sorted(think_totals_s)[many - (many + 1) // 2 :]
    return max((due + 1) / (think + allowance_s) for due, think in enumerate(half))


async def floor_sessions_per_s(
    url: str, stores: list[StreamStores], source: Namespace, target: Namespace, sessions: int
) -> float:
    """Sessions a second raw nats-py makes `stores` at, into `target` (provisioned as
    `source` is): `sessions` sessions' stores split over `_PUBLISHERS` processes, timed from
    the start signal all of them wait for to the last one's end."""
    share = [
        (
            moved(s.stream, source, target),
            moved(s.subject, source, target),
            round(s.per_session * sessions / _PUBLISHERS),
            s.size,
            s.batched,
        )
        for s in stores
    ]
    spec = json.dumps(share)
    children = []
    try:
        for _ in range(_PUBLISHERS):
            child = await asyncio.create_subprocess_exec(
                *owned_argv(python_command("-c", _RUN_PUBLISHER, url, spec)),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            children.append(child)
        for child in children:
            assert child.stdout is not None  # noqa: S101 - asked for above
            line = await asyncio.wait_for(child.stdout.readline(), _START_TIMEOUT_S)
            if line.strip() != b"ready":
                raise RuntimeError("a floor publisher did not start")
        started = time.perf_counter()
        for child in children:
            assert child.stdin is not None  # noqa: S101 - asked for above
            child.stdin.write(b"go\n")
            await child.stdin.drain()
        for child in children:
            assert child.stdout is not None  # noqa: S101 - asked for above
            line = await asyncio.wait_for(child.stdout.readline(), _RUN_TIMEOUT_S)
            if line.strip() != b"done":
                raise RuntimeError("a floor publisher failed")
        return sessions / (time.perf_counter() - started)
    finally:
        for child in children:
            if child.returncode is None:
                child.terminate()
            await child.wait()


def _fresh(subject: str, token: str) -> str:
    """`subject` with each wildcard the store's own token: every store on a subject of its
    own, as Parley's keys and sessions mostly are, so no per-subject limit drops or refuses
    one."""
    return subject.replace("*", token).replace(">", token)


async def run_publisher(url: str, spec: str) -> None:
    """One floor process: connect, say `ready`, wait for `go` on stdin, make every store of
    `spec` ([stream, subject, count, size, batched], ...), say `done`. A stream that takes
    fast batches gets its stores `_BATCH` at a time, `_BATCHES_IN_FLIGHT` batches awaiting
    at once; any other, single publishes, `_IN_FLIGHT` awaiting at once."""
    share: list[tuple[str, str, int, int, bool]] = [tuple(item) for item in json.loads(spec)]
    nc = await nats.connect(url)
    js = nc.jetstream()
    batcher = FastBatcher(nc, AckInbox(nc))
    await batcher.inbox.open()
    await batcher.open()
    singles, batches = asyncio.Semaphore(_IN_FLIGHT), asyncio.Semaphore(_BATCHES_IN_FLIGHT)
    me = f"p{os.getpid()}"

    async def store(subject: str, index: int, size: int) -> None:
        async with singles:
            await js.publish(_fresh(subject, f"{me}x{index}"), b"x" * size)

    async def batch(stream: str, subject: str, indexes: range, size: int) -> None:
        async with batches:
            effects = batcher.begin()
            stored = [
                await effects.publish(stream, _fresh(subject, f"{me}x{index}"), b"x" * size, {})
                for index in indexes
            ]
            await effects.commit()
            await asyncio.gather(*stored)

    work: list[Awaitable[None]] = []
    for stream, subject, count, size, batched in share:
        if batched:
            work += [
                batch(stream, subject, range(first, min(first + _BATCH, count)), size)
                for first in range(0, count, _BATCH)
            ]
        else:
            work += [store(subject, index, size) for index in range(count)]
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await asyncio.gather(*work)
    print("done", flush=True)
    await nc.close()
