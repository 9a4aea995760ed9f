"""Pipelined JetStream publishes whose acknowledgements always arrive, refused or not.

nats-py's `publish_async` leaves its future pending for ever when JetStream refuses a
publish: its reply handler builds the error with `APIError.from_error`, which raises instead
of returning, so the future is never resolved (nats-py 2.16). The audit chain depends on
learning promptly that an append was refused (a wrong expected sequence), so the auditor
publishes with its own reply inbox: one wildcard subscription, one future per publish,
resolved with the `PubAck`, an `AppendRefused`, or an `AppendTimeout` when no answer comes.
"""

from __future__ import annotations

import asyncio
import itertools
import json

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import PubAck

__all__ = ("AckInbox", "AppendRefused", "AppendTimeout")


class AppendRefused(RuntimeError):
    """JetStream refused the publish (`err_code` 10071: wrong expected last sequence)."""

    def __init__(self, code: int, err_code: int, description: str) -> None:
        super().__init__(f"{code}/{err_code}: {description}")
        self.err_code = err_code


class AppendTimeout(RuntimeError):
    """No answer in time: the publish may or may not have been stored."""


class AckInbox:
    """Publishes with a reply subject of its own and resolves one future per publish."""

    def __init__(self, nc: NATS, *, timeout: float) -> None:
        self._nc = nc
        self._timeout = timeout
        self._prefix = ""
        self._tokens = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[PubAck]] = {}
        self._sub: Subscription | None = None

    async def open(self) -> None:
        """Subscribe the reply inbox (idempotent)."""
        if self._sub is None:
            self._prefix = self._nc.new_inbox()
            self._sub = await self._nc.subscribe(f"{self._prefix}.*", cb=self._on_reply)

    async def publish(
        self, subject: str, data: bytes, headers: dict[str, str]
    ) -> asyncio.Future[PubAck]:
        """Send now; the future resolves when JetStream answers (or `timeout` passes)."""
        if self._sub is None:
            raise RuntimeError("AckInbox.publish before open()")
        token = str(next(self._tokens))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[PubAck] = loop.create_future()
        self._waiting[token] = future
        expire = loop.call_later(self._timeout, self._expire, token)
        future.add_done_callback(lambda _: expire.cancel())
        await self._nc.publish(subject, data, reply=f"{self._prefix}.{token}", headers=headers)
        return future

    def _expire(self, token: str) -> None:
        future = self._waiting.pop(token, None)
        if future is not None and not future.done():
            future.set_exception(AppendTimeout(f"no acknowledgement in {self._timeout}s"))

    async def _on_reply(self, msg: Msg) -> None:
        future = self._waiting.pop(msg.subject.rsplit(".", 1)[-1], None)
        if future is None or future.done():
            return
        if msg.headers and msg.headers.get("Status") == "503":
            future.set_exception(AppendRefused(503, 0, "no stream listens on this subject"))
            return
        try:
            reply = json.loads(msg.data)
        except ValueError:
            future.set_exception(AppendRefused(0, 0, f"unreadable reply {msg.data[:100]!r}"))
            return
        error = reply.get("error")
        if error:
            future.set_exception(
                AppendRefused(
                    int(error.get("code", 0)),
                    int(error.get("err_code", 0)),
                    str(error.get("description", "")),
                )
            )
            return
        future.set_result(PubAck.from_response(reply))
