"""Pull requests to a durable consumer, each answered on a reply subject of its own.

Why not nats-py's `PullSubscription.fetch`: every fetch of one subscription shares one reply
inbox, so a status the server sends for a request the client already gave up on (the 408 of
a fetch whose client timer fired a few milliseconds before the server's expiry) lands in the
next fetch, which takes it for its own answer and sends a second, lingering request beside
the one still waiting on the server. That orphan takes the next message stored; the fetch
it lands in then waits for the rest of its batch of 64 until the orphan expires: the message
is handed over up to one fetch timeout late (the 3.4-5.5 s stalls), and the orphan's own
late 408 starts the same chain again.

Here every request has its own token in the reply subject, so a status is only ever taken
by the request it was sent for (the server delivers stored messages under their own subject,
so those cannot carry the token; one request is open at a time and takes them, never more
than it asked for). Only two kinds of request are sent, both of which end on the server in
a way the client sees:

- a no-wait request for every free slot: the messages stored now, then `404 No Messages`
  (or nothing, once the batch is full);
- when that found none, a lingering request for one message, expiring on the server before
  the client would give up, with an idle heartbeat: it ends with its one message or with
  `408 Request Timeout`, and the client abandons it only when the heartbeats stop (the
  request was lost with a reconnect).

The no-wait request is skipped when the last message delivered said nothing was pending
behind it (its `num_pending`, in the ack subject) and was not a redelivery (redeliveries are
not counted there), or when the last lingering request expired empty: there is then nothing
for it to find but its `404`, and a lingering request takes a message stored meanwhile at
once. One message at a time (an idle system's every hop), that halves the pull requests and
their answers; the message it brings says again whether a batch is waiting.

A message that arrives while no request is open (one delivered to a request the client gave
up on) is given back to the server (nak), redelivered at once instead of after the ack
wait, so the caller never holds more than the room it asked for. Each such nak costs the
message a delivery, so orphans must stay rare: no request is sent while the connection is
down (`Link`, bus/_connection.py), where nats-py would buffer every one the loop makes in
an outage and send them together on reconnect.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Mapping

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from bus._connection import Link

__all__ = ("PullRefusedError", "Puller")

log = logging.getLogger("parley.bus.puller")

_STATUS = "Status"
_DESCRIPTION = "Description"
_IDLE_HEARTBEAT = "100"
_ENDED = frozenset({"404", "408"})  # no messages now / expired (or requests pending)
_SILENT_HEARTBEATS = 3  # heartbeats missed before a lingering request is taken for lost


class PullRefusedError(RuntimeError):
    """The server refused a pull request (consumer deleted, leadership change, limits)."""

    def __init__(self, status: str, description: str) -> None:
        super().__init__(f"pull request refused: {status} {description}".strip())
        self.status = status


class Puller:
    """Fetch from one durable pull consumer with a reply subject per request."""

    def __init__(
        self,
        nc: NATS,
        next_subject: str,
        *,
        expires_s: float,
        heartbeat_s: float,
        link: Link | None = None,
    ) -> None:
        """`next_subject`: the consumer's `CONSUMER.MSG.NEXT` subject. A lingering request
        expires on the server after `expires_s` and sends an idle heartbeat every
        `heartbeat_s` (at most half of `expires_s`, as the server requires). With `link`, a
        request waits for the connection to be up rather than in nats-py's buffer."""
        self._nc = nc
        self._link = link
        self._next_subject = next_subject
        self._expires_ns = int(expires_s * 1e9)
        heartbeat_s = min(heartbeat_s, expires_s / 2)
        self._heartbeat_ns = int(heartbeat_s * 1e9)
        self._silence_s = heartbeat_s * _SILENT_HEARTBEATS
        self._no_wait_s = expires_s
        self._inbox = ""
        self._subscription: Subscription | None = None
        self._tokens = itertools.count()
        self._open: tuple[str, asyncio.Queue[Msg | None]] | None = None  # one at a time
        """The open request's token and answers; None in the answers: the connection was lost."""
        self._backlog_likely = True  # until a delivered message says nothing is behind it
        self.lingered = False
        """Whether the last fetch's messages came from a lingering request (none were
        stored when it asked): the input had been idle."""

    async def start(self) -> None:
        """Listen on this puller's inbox (under the connection's inbox prefix)."""
        self._inbox = self._nc.new_inbox()
        self._subscription = await self._nc.subscribe(f"{self._inbox}.*", cb=self._route)
        if self._link is not None:
            self._link.watch(self._connection_lost)

    def _connection_lost(self) -> None:
        """End the open request: it went with the connection, and nothing will answer it."""
        if self._open is not None:
            self._open[1].put_nowait(None)

    async def close(self) -> None:
        if self._link is not None:
            self._link.unwatch(self._connection_lost)
        if self._subscription is not None:
            subscription, self._subscription = self._subscription, None
            await subscription.unsubscribe()

    async def fetch(self, room: int) -> list[Msg]:
        """Up to `room` messages: those stored now, else the first one stored from now on.

        Returns an empty list when a lingering request expired (or was lost) without one.

        Raises:
            PullRefusedError: the server refused a request.
        """
        self.lingered = False
        if self._backlog_likely:
            messages = await self.fetch_now(room)
            if messages:
                return messages
        self.lingered = True
        lingering = {
            "batch": 1,
            "expires": self._expires_ns,
            "idle_heartbeat": self._heartbeat_ns,
        }
        messages = await self._request(lingering, 1, self._silence_s)
        self._backlog_likely = bool(messages) and _more_behind(messages[-1])
        return messages

    async def fetch_now(self, room: int) -> list[Msg]:
        """Up to `room` of the messages stored now, without lingering (none: empty).

        Raises:
            PullRefusedError: the server refused the request.
        """
        no_wait = {"batch": room, "no_wait": True}
        messages = await self._request(no_wait, room, self._no_wait_s)
        if messages:
            self._backlog_likely = _more_behind(messages[-1])
        return messages

    async def _request(
        self, request: Mapping[str, object], batch: int, silence_s: float
    ) -> list[Msg]:
        """Send one request and collect its answers until it ends (or falls silent)."""
        if self._link is not None:
            await self._link.wait_up(self._nc)
        token = str(next(self._tokens))
        answers: asyncio.Queue[Msg | None] = asyncio.Queue()
        self._open = (token, answers)
        messages: list[Msg] = []
        try:
            await self._nc.publish(
                self._next_subject, json.dumps(request).encode(), reply=f"{self._inbox}.{token}"
            )
            while len(messages) < batch:
                try:
                    msg = answers.get_nowait()
                except asyncio.QueueEmpty:
                    try:  # not wait_for: on 3.11 it can swallow a stop's cancellation
                        async with asyncio.timeout(silence_s):
                            msg = await answers.get()
                    except TimeoutError:
                        log.debug("pull request fell silent", extra={"request": request})
                        break
                if msg is None:
                    log.debug("pull request lost with the connection", extra={"request": request})
                    break
                status = _status(msg)
                if status is None:
                    messages.append(msg)
                elif status in _ENDED:
                    break
                elif status != _IDLE_HEARTBEAT:
                    if messages:  # what was delivered is ours; the refusal shows next time
                        break
                    raise PullRefusedError(status, _header(msg, _DESCRIPTION))
        finally:
            self._open = None
        return messages

    async def _route(self, msg: Msg) -> None:
        """Hand an answer to the open request: a status only if it was sent for that one."""
        status = _status(msg)
        if self._open is not None:
            token, answers = self._open
            if status is None or msg.subject.rpartition(".")[2] == token:
                answers.put_nowait(msg)
                return
        if status is None and msg.reply:
            try:
                await msg.nak()
            except Exception as exc:  # unacknowledged, it comes back after the ack wait
                log.debug("nak of a late message failed", extra={"error": repr(exc)})


def _more_behind(msg: Msg) -> bool:
    """Whether messages may be waiting behind `msg`: some were pending when it was delivered,
    or it was a redelivery (others due again are not counted as pending). True when the
    subject does not say."""
    try:
        metadata = msg.metadata
    except Exception:  # not a JetStream delivery: assume a batch may wait
        return True
    return metadata.num_pending > 0 or metadata.num_delivered > 1


def _header(msg: Msg, name: str) -> str:
    return (msg.headers or {}).get(name, "")


def _status(msg: Msg) -> str | None:
    """The server's status code when `msg` is a status rather than a stored message."""
    if msg.data or not msg.headers:
        return None
    return msg.headers.get(_STATUS) or None
