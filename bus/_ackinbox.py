"""Pipelined JetStream publishes and acks, answered on one reply inbox per connection.

Every effect an actor stores and every input it acks is a request to the server. nats-py's
own paths cost more than the work they wrap: `publish_async` takes a semaphore through
`asyncio.wait_for`, reads `os.urandom` for each reply token and decodes each `PubAck` with
`json` into a dataclass; `ack_sync` opens a request of its own. On the gate's hot path that
was most of the Python time per envelope (docs/benchmarks.md). Worse, `publish_async` leaves
its future pending for ever when JetStream refuses a publish (its reply handler builds the
error with `APIError.from_error`, which raises instead of returning: nats-py 2.16), so a
refused effect only showed as a timeout.

`AckInbox` subscribes one wildcard inbox (under the actor's own inbox prefix, which its broker
permissions allow) and answers every request with a future: a counter names the reply, msgspec
decodes the answer, and a refusal resolves the future at once with `AppendRefused`.

A request sent before the connection dropped gets no answer: the reply, or the request
itself, went with the connection, and a server killed and started again has no record of it.
Each used to wait out its timeout (the runtime's: half an ack wait, 15 s), so every actor with
a store in flight when `parley up`'s server was killed stood still that long after the server
was back in half a second. An inbox given the connection's `Link` fails them with
`PublishLost` as soon as the connection is back; their callers publish again under the same
ids, which JetStream stores once. What was sent while it was down waits in nats-py's buffer,
goes out on the reconnect, and is answered as usual.

Nothing larger than the server's `max_payload` is ever sent: nats-py checks the payload alone,
but the server counts the headers too and closes the connection of a client that sends more
(`Maximum Payload Violation`), which took every in-flight message of the actor with it. A
publish that would not fit raises `MessageTooLarge` before anything is written.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import PubAck

from bus._connection import Link

__all__ = (
    "AckInbox",
    "AppendRefused",
    "AppendTimeout",
    "MessageTooLarge",
    "PublishLost",
    "PublishStalled",
    "wire_size",
)

_ACK = b"+ACK"
_SWEEP_EVERY = 4096
"""Publishes between sweeps of futures abandoned (cancelled) by a caller's deadline."""


class AppendRefused(RuntimeError):
    """JetStream refused the publish (`err_code` 10071: wrong expected last sequence)."""

    def __init__(self, code: int, err_code: int, description: str) -> None:
        super().__init__(f"{code}/{err_code}: {description}")
        self.err_code = err_code


class AppendTimeout(RuntimeError):
    """No answer in time: the publish may or may not have been stored."""


class PublishLost(ConnectionError):
    """Sent before the connection dropped, and unanswered when it came back: no answer will
    come. It may or may not have been stored; sent again under its id, it is stored once."""

    def __init__(self) -> None:
        super().__init__("sent before the connection to the server dropped: no answer will come")


class PublishStalled(RuntimeError):
    """Too many requests wait for answers (the server is down or overloaded)."""


class MessageTooLarge(ValueError):
    """A message whose payload plus encoded headers exceed the server's `max_payload`.

    Raised before sending: the server would close the whole connection instead of refusing
    the one message. Deterministic, so retrying the same input cannot help.
    """

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"message too large: {size} > {limit} bytes (headers included)")
        self.size = size
        self.limit = limit


_HEADER_LINE = len(b"NATS/1.0\r\n") + len(b"\r\n")
"""The status line and the blank line that end a header block."""


def wire_size(payload: bytes, headers: Mapping[str, str] | None) -> int:
    """The size the server checks against `max_payload`: payload plus the header block as
    nats-py encodes it (`NATS/1.0`, one `key: value` line per header, a blank line)."""
    if not headers:
        return len(payload)
    # Joined and measured at once (each line is `key: value` and CRLF): a loop over the
    # lines cost the gate four times per envelope what the join does.
    values = "".join(headers.values())
    size = len(values) if values.isascii() else len(values.encode())
    return len(payload) + _HEADER_LINE + len("".join(headers)) + size + 4 * len(headers)


class _ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class _Answer(msgspec.Struct):
    """What JetStream answers a publish: a `PubAck`, or an error."""

    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    domain: str | None = None
    error: _ApiError | None = None


_decode_answer = msgspec.json.Decoder(_Answer).decode


class AckInbox:
    """Publishes and acks with a reply subject of its own; one future per request."""

    def __init__(
        self,
        nc: NATS,
        *,
        timeout: float | None = None,
        max_pending: int = 8192,
        link: Link | None = None,
    ) -> None:
        """`timeout`: resolve a publish with `AppendTimeout` when no answer comes in time
        (None: the caller waits with its own deadline and cancels what is late).
        `max_pending`: requests awaiting answers beyond which `publish` waits for room.
        `link`: the connection's, to fail what was in flight when it dropped with
        `PublishLost` once it is back (module doc); None: each waits out its timeout."""
        self._nc = nc
        self._timeout = timeout
        self._max_pending = max_pending
        self._prefix = ""
        self._tokens = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[PubAck]] = {}
        self._acks: dict[str, asyncio.Future[None]] = {}
        self._room = asyncio.Event()
        self._sub: Subscription | None = None
        self._sent_before_drop: set[str] = set()
        """Tokens of requests in flight when the connection last dropped."""
        if link is not None:
            link.watch(self._dropped)
            link.watch_back(self._back)

    def _dropped(self) -> None:
        self._sent_before_drop.update(self._waiting, self._acks)

    def _back(self) -> None:
        lost, self._sent_before_drop = self._sent_before_drop, set()
        for token in lost:
            future = self._waiting.pop(token, None) or self._acks.pop(token, None)
            if future is not None and not future.done():
                future.set_exception(PublishLost())
        if not self._room.is_set() and self.pending() < self._max_pending // 2:
            self._room.set()

    async def open(self) -> None:
        """Subscribe the reply inbox (idempotent)."""
        if self._sub is None:
            self._prefix = self._nc.new_inbox() + "."
            self._sub = await self._nc.subscribe(f"{self._prefix}*", cb=self._on_reply)

    def pending(self) -> int:
        """Requests sent and not yet answered (nor abandoned)."""
        return len(self._waiting) + len(self._acks)

    async def publish(
        self,
        subject: str,
        data: bytes,
        headers: dict[str, str],
        *,
        stall_s: float = 5.0,
        timeout: float | None = None,
    ) -> asyncio.Future[PubAck]:
        """Send now; the future resolves when JetStream answers, or with `AppendTimeout`
        after `timeout` (this inbox's own when None).

        Raises:
            MessageTooLarge: payload and headers exceed the server's `max_payload`.
            PublishStalled: `max_pending` requests have waited for answers for `stall_s`.
            Exception: nats-py could not send it (too large, closed, buffer full while
                reconnecting); nothing is left waiting for an answer.
        """
        if self._sub is None:
            raise RuntimeError("AckInbox.publish before open()")
        size = wire_size(data, headers)
        if size > self._nc.max_payload:
            raise MessageTooLarge(size, self._nc.max_payload)
        token = await self._next_token(stall_s)
        future: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
        self._waiting[token] = future
        try:
            # No headers go as a plain PUB: nats-py would send an empty header block.
            await self._nc.publish(
                subject, data, reply=self._prefix + token, headers=headers or None
            )
        except BaseException:
            self._waiting.pop(token, None)
            future.cancel()
            raise
        timeout = self._timeout if timeout is None else timeout
        if timeout is not None:
            expire = future.get_loop().call_later(timeout, self._expire, token, timeout)
            future.add_done_callback(lambda _: expire.cancel())
        return future

    async def ack(self, reply: str, *, stall_s: float = 5.0) -> asyncio.Future[None]:
        """Ack a JetStream message (`msg.reply`); the future resolves once the server has
        recorded the ack, as nats-py's `ack_sync` would, without a request of its own.

        An ack has no timeout of its own: the caller waits with its deadline.

        Raises:
            PublishStalled, Exception: as `publish`.
        """
        if self._sub is None:
            raise RuntimeError("AckInbox.ack before open()")
        token = "a" + await self._next_token(stall_s)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._acks[token] = future
        try:
            await self._nc.publish(reply, _ACK, reply=self._prefix + token)
        except BaseException:
            self._acks.pop(token, None)
            future.cancel()
            raise
        return future

    async def _next_token(self, stall_s: float) -> str:
        number = next(self._tokens)
        if number % _SWEEP_EVERY == 0:
            self._sweep()
        if self.pending() < self._max_pending:
            return str(number)
        self._sweep()
        if self.pending() >= self._max_pending:
            self._room.clear()
            try:
                await asyncio.wait_for(self._room.wait(), stall_s)
            except TimeoutError:
                raise PublishStalled(
                    f"{self.pending()} requests unanswered for {stall_s}s"
                ) from None
        return str(number)

    def _sweep(self) -> None:
        """Forget futures a caller cancelled at its deadline: no answer will come for them."""
        for table in (self._waiting, self._acks):
            for token in [token for token, future in table.items() if future.done()]:
                del table[token]

    def _expire(self, token: str, timeout: float) -> None:
        future = self._waiting.pop(token, None)
        if future is not None and not future.done():
            future.set_exception(AppendTimeout(f"no acknowledgement in {timeout}s"))

    async def _on_reply(self, msg: Msg) -> None:
        token = msg.subject[len(self._prefix) :]
        no_responders = msg.headers is not None and msg.headers.get("Status") == "503"
        if token.startswith("a"):
            acked = self._acks.pop(token, None)
            if acked is not None and not acked.done():
                if no_responders:  # as ack_sync: the consumer was deleted or re-created
                    acked.set_exception(AppendRefused(503, 0, "no consumer took this ack"))
                else:
                    acked.set_result(None)
        else:
            future = self._waiting.pop(token, None)
            if future is not None and not future.done():
                self._answer(future, msg, no_responders)
        if not self._room.is_set() and self.pending() < self._max_pending // 2:
            self._room.set()

    @staticmethod
    def _answer(future: asyncio.Future[PubAck], msg: Msg, no_responders: bool) -> None:
        if no_responders:
            future.set_exception(AppendRefused(503, 0, "no stream listens on this subject"))
            return
        try:
            answer = _decode_answer(msg.data)
        except msgspec.DecodeError:
            future.set_exception(AppendRefused(0, 0, f"unreadable reply {msg.data[:100]!r}"))
            return
        error = answer.error
        if error is not None:
            future.set_exception(AppendRefused(error.code, error.err_code, error.description))
            return
        future.set_result(
            PubAck(
                stream=answer.stream,
                seq=answer.seq,
                domain=answer.domain,
                duplicate=answer.duplicate,
            )
        )
