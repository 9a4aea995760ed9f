"""The error answers a person's terminal gets back, for a load generator that must notice them.

A refused submission (`RATE_LIMITED`, `POLICY_DENIED`, ...) opens no session, so no session
event ever comes for it: a client that follows only the timelines waits out its whole
patience and then opens the next session, and a run whose every submission is refused looks
idle rather than broken. The gate delivers each refusal to the sender's deliver subject
(`<ns>.deliver.<person>`, read through the durable `parley up` provisions for the person);
`Refusals` reads that durable, counts every error by code, and hands each to whoever waits on
the envelope it answers (its `cause_id`).

A `DUPLICATE_ENVELOPE` refusal is counted but wakes nobody: it answers a repeat of an envelope
the gate already decided, whose first decision (and session) stands.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

from nats.js import JetStreamContext

from schemas import DecodeError, Error, ErrorCode, Namespace, decode_envelope

__all__ = ("Refusals",)

_BATCH = 32
_FETCH_S = 1.0
_PAUSE_S = 0.5


class Refusals:
    """The error answers delivered to one person, counted by code and routed by cause."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._waiting: dict[str, asyncio.Future[Error]] = {}
        self._seen: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def expect(self, envelope_id: str) -> asyncio.Future[Error]:
        """A future set with the error answering `envelope_id`, if one comes (register it
        before submitting, so an error faster than the caller is not missed)."""
        future: asyncio.Future[Error] = asyncio.get_running_loop().create_future()
        self._waiting[envelope_id] = future
        return future

    def forget(self, envelope_id: str) -> None:
        """Stop waiting on `envelope_id` (its session ended, or its caller gave up)."""
        future = self._waiting.pop(envelope_id, None)
        if future is not None and not future.done():
            future.cancel()

    def total(self) -> int:
        return sum(self.counts.values())

    async def follow(self, js: JetStreamContext, ns: Namespace, person: str) -> None:
        """Start reading `person`'s deliveries (its durable on the deliver stream, named after
        it) until `close`; through server restarts, as a client would keep asking."""
        sub = await js.pull_subscribe(
            ns.deliver(person), durable=person, stream=ns.stream("deliver")
        )

        async def pull() -> None:
            # Not `while True`: on Python 3.11 nats-py's fetch (asyncio.wait_for inside) can
            # turn a cancellation that meets its own timeout into TimeoutError, and a loop
            # that goes on after a TimeoutError then never ends (a chaos run hung at its end).
            while not self._closing:
                try:
                    msgs = await sub.fetch(_BATCH, timeout=_FETCH_S)
                except TimeoutError:
                    continue
                except Exception:  # the server is away: ask again once it may be back
                    await asyncio.sleep(_PAUSE_S)  # retry pacing while the broker is away
                    continue
                for msg in msgs:
                    self.take(msg.data)
                    with contextlib.suppress(Exception):  # if redelivered, counted once
                        await msg.ack()

        self._task = asyncio.create_task(pull())

    def take(self, data: bytes) -> Error | None:
        """Count one delivery if it is an error, and wake whoever waits on its cause."""
        try:
            envelope = decode_envelope(data)
        except DecodeError:
            self.counts["undecodable"] += 1
            return None
        if not isinstance(envelope, Error) or envelope.id in self._seen:
            return None
        self._seen.add(envelope.id)
        self.counts[envelope.code.value] += 1
        if envelope.code == ErrorCode.DUPLICATE_ENVELOPE or envelope.cause_id is None:
            return envelope
        future = self._waiting.pop(envelope.cause_id, None)
        if future is not None and not future.done():
            future.set_result(envelope)
        return envelope

    async def close(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
