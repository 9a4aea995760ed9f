"""The last message on each of many subjects, in one round trip: batched direct gets.

A KV look-up through nats-py (`kv.get`) is one request per key, each with a reply future, a
JSON-encoded API request and a decoded answer. The gate looks up every envelope id it decides,
and almost every look-up misses (a new envelope's id is new), so per-key requests cost more
Python time than deciding the envelope. `$JS.API.DIRECT.GET.<stream>` with `multi_last`
(nats-server 2.11+) answers the last message of each listed subject in one request, nothing
for a subject that holds none, and then an end-of-batch status: one request per batch of
envelopes. Like every direct get it reads what the server has stored, creates no consumer, and
needs the stream to allow direct gets.

Given the connection's `Link`, a read in flight when the connection dropped fails with
`PublishLost` once it is back, instead of waiting out its timeout: its answers went with the
connection (bus/_ackinbox.py says why that cost the gate 15 s after its server restarted).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Sequence

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from bus._ackinbox import PublishLost
from bus._connection import Link
from bus._history import DIRECT_HEADERS, HistoryError, StoredMessage

__all__ = ("LastValues",)

_CHUNK = 256
"""Subjects per request (the server answers at most `batch` messages per request)."""
_KV_OPERATION = "KV-Operation"


class LastValues:
    """Batched last-message reads on one connection, answered on an inbox of its own."""

    def __init__(self, nc: NATS, api_prefix: str = "$JS.API", *, link: Link | None = None) -> None:
        self._nc = nc
        self._api = api_prefix
        self._prefix = ""
        self._tokens = itertools.count(1)
        self._waiting: dict[str, asyncio.Queue[Msg | None]] = {}
        """Each read's answers; None in its queue: the connection dropped under it."""
        self._sub: Subscription | None = None
        self._sent_before_drop: set[str] = set()
        if link is not None:
            link.watch(self._dropped)
            link.watch_back(self._back)

    def pending(self) -> int:
        """Reads sent and not yet fully answered."""
        return len(self._waiting)

    def _dropped(self) -> None:
        self._sent_before_drop.update(self._waiting)

    def _back(self) -> None:
        lost, self._sent_before_drop = self._sent_before_drop, set()
        for token in lost:
            answers = self._waiting.get(token)
            if answers is not None:
                answers.put_nowait(None)

    async def open(self) -> None:
        """Subscribe the reply inbox (idempotent)."""
        if self._sub is None:
            self._prefix = self._nc.new_inbox() + "."
            self._sub = await self._nc.subscribe(f"{self._prefix}*", cb=self._on_reply)

    async def _on_reply(self, msg: Msg) -> None:
        answers = self._waiting.get(msg.subject[len(self._prefix) :])
        if answers is not None:  # else a late answer to a read that gave up
            answers.put_nowait(msg)

    async def read(
        self, stream: str, subjects: Sequence[str], *, timeout: float = 5.0
    ) -> dict[str, StoredMessage]:
        """The last message stored on each of `subjects` that holds one; a subject whose last
        message is a KV delete or purge marker holds none.

        Raises:
            HistoryError: the server refused the read (no such stream, no direct gets).
            TimeoutError: an answer did not arrive within `timeout`.
            PublishLost: the connection dropped while the read waited (given a `Link`).
        """
        if self._sub is None:
            raise RuntimeError("LastValues.read before open()")
        found: dict[str, StoredMessage] = {}
        wanted = list(dict.fromkeys(subjects))
        for start in range(0, len(wanted), _CHUNK):
            chunk = wanted[start : start + _CHUNK]
            token = str(next(self._tokens))
            answers: asyncio.Queue[Msg | None] = asyncio.Queue()
            self._waiting[token] = answers
            try:
                request = json.dumps({"multi_last": chunk, "batch": len(chunk)}).encode()
                await self._nc.publish(
                    f"{self._api}.DIRECT.GET.{stream}", request, reply=self._prefix + token
                )
                async with asyncio.timeout(timeout):
                    while (stored := await self._next(stream, answers)) is not None:
                        if stored.headers.get(_KV_OPERATION) not in ("DEL", "PURGE"):
                            found[stored.subject] = stored
            finally:
                del self._waiting[token]
        return found

    @staticmethod
    async def _next(stream: str, answers: asyncio.Queue[Msg | None]) -> StoredMessage | None:
        msg = await answers.get()
        if msg is None:
            raise PublishLost
        headers = msg.headers or {}
        status = headers.get("Status")
        if status in ("404", "204"):  # nothing matched / the end of the batch
            return None
        if status is not None:
            raise HistoryError(f"reading the last messages of {stream}: {status} {msg.data!r}")
        own = {k: v for k, v in headers.items() if k not in DIRECT_HEADERS}
        return StoredMessage(int(headers["Nats-Sequence"]), headers["Nats-Subject"], msg.data, own)
