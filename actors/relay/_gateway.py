"""The relay's connection to the gateway nats-server: one stream of sealed frames.

A frame to device D from device S is published on `<root>.<D>.<S>` with a `Nats-Msg-Id`
derived from (S, session, sequence number), so a frame sent again after a crash is stored once.
Frames are sent pipelined on one reply inbox (bus/_ackinbox.py): the relay sends a whole
batch's frames, in order, and its runtime acks each input once the gateway stored its frame.
Each relay reads its own subjects (`<root>.<own device>.*`) through a durable pull consumer:
a frame it took and did not ack (SIGKILL mid-forward) is given again after the ack wait. The
stream keeps frames until they are acked (a work queue), so a relay that is down finds its
frames waiting; a sender that cannot reach the gateway leaves the envelope unacked in its own
deployment's queue, which retries until the gateway takes it.

While a relay holds fetched frames it tells the gateway they are in progress (every third of
the ack wait, as the bus does for actors' inputs), so a frame slower than the ack wait is not
given to another replica of the same device meanwhile; a handler stuck past `max_handler_s`
stops being vouched for, and its frame goes to another replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DiscardPolicy,
    PubAck,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError

from bus import AckInbox, Link, Puller, PullRefusedError, fail_lost_requests

__all__ = ("Gateway", "frame_msg_id", "gateway_stream")

log = logging.getLogger("parley.relay")

_MAX_AGE_S = 7 * 24 * 3600.0
GATEWAY_MAX_BYTES = 1024 * 1024 * 1024
"""What the gateway's stream may hold (docs/quotas.md): past it a frame is refused, never an
older one dropped (a dropped frame would be a lost message)."""
GATEWAY_PER_PAIR = 10_000
"""Frames one device may have waiting for one recipient (`<root>.<to>.<from>`); past it that
sender's next frame is refused and nobody else's."""
_STORE_TIMEOUT_S = 5.0
_BATCH = 16
_FETCH_EXPIRES_S = 1.0
_FETCH_HEARTBEAT_S = 0.4
"""How long a frame may wait for the gateway's answer before its input is retried."""


def frame_msg_id(sender: str, session: str, seq: int, numbered_by: str = "relay") -> str:
    """The gateway's de-duplication id of a frame: the same for every copy of it, and saying
    nothing of the session to the gateway. Each numbering (`FrameBody.numbered_by`) has ids
    of its own."""
    number = f"d{seq}" if numbered_by == "deliveries" else str(seq)
    return hashlib.sha256(f"{sender}:{session}:{number}".encode()).hexdigest()[:32]


def gateway_stream(root: str) -> StreamConfig:
    """The gateway's one stream: every frame, kept until its recipient's relay acks it."""
    return StreamConfig(
        name=root.upper().replace("-", "_"),
        subjects=[f"{root}.*.*"],
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        max_age=_MAX_AGE_S,
        duplicate_window=120.0,
        max_bytes=GATEWAY_MAX_BYTES,
        discard=DiscardPolicy.NEW,
        max_msgs_per_subject=GATEWAY_PER_PAIR,
        discard_new_per_subject=True,
    )


class _InHand:
    """A fetched batch of frames, handled in order: those not yet handled are in hand."""

    def __init__(self, msgs: Sequence[Msg]) -> None:
        self.msgs = msgs
        self.handled = 0
        self.since = time.monotonic()

    async def vouch(self, period_s: float, limit_s: float) -> None:
        """Tell the gateway every `period_s` that the frames in hand are in progress, for at
        most `limit_s`: a hung relay must not hold its frames for ever."""
        while time.monotonic() - self.since < limit_s:
            await asyncio.sleep(period_s)  # the heartbeat's own timer, not a wait for an event
            for msg in self.msgs[self.handled :]:
                try:
                    await msg.in_progress()
                except Exception as exc:  # a lost heartbeat only risks a redelivery
                    log.debug("in_progress failed", extra={"error": repr(exc)})


class Gateway:
    """One relay's publishes to, and durable reads from, the gateway."""

    def __init__(
        self,
        url: str,
        root: str,
        device_id: str,
        *,
        nkey_seed_file: str | None,
        ack_wait_s: float,
        max_handler_s: float = 300.0,
    ) -> None:
        self._url, self._root, self._device = url, root, device_id
        self._seed, self._ack_wait = nkey_seed_file, ack_wait_s
        self._max_handler_s = max_handler_s
        self._nc: NATS | None = None
        self._js: JetStreamContext | None = None
        self._acks: AckInbox | None = None
        self._link = Link()  # no pull request waits in nats-py's buffer through an outage

    @property
    def stream(self) -> str:
        return self._root.upper().replace("-", "_")

    def subject(self, recipient: str, sender: str) -> str:
        return f"{self._root}.{recipient}.{sender}"

    async def connect(self) -> None:
        link = self._link

        async def down() -> None:
            link.down()

        async def up() -> None:
            link.up()

        options: dict[str, object] = {
            "disconnected_cb": down,
            "reconnected_cb": up,
            "closed_cb": up,
            "servers": [self._url],
            "name": f"parley-relay-{self._device[:16]}",
            "inbox_prefix": f"_INBOX_{self._device[:16]}".encode(),
            "ping_interval": 5,
            "max_outstanding_pings": 3,
            "reconnect_time_wait": 0.5,
            "max_reconnect_attempts": -1,
            "allow_reconnect": True,
            "connect_timeout": 5,
        }
        if self._seed:
            options["nkeys_seed"] = self._seed
        self._nc = await nats.connect(**options)  # type: ignore[arg-type]
        self._js = self._nc.jetstream()
        # What was in flight when the gateway's server went fails once it is back, not after
        # `_STORE_TIMEOUT_S`: its stores with `PublishLost`, nats-py's own requests (the
        # consumer's reads) with a timeout, and the frames' inputs are retried at once.
        self._acks = AckInbox(self._nc, timeout=_STORE_TIMEOUT_S, link=link)
        fail_lost_requests(self._nc, link)
        await self._acks.open()
        try:
            await self._js.stream_info(self.stream)
        except NotFoundError:
            # An open gateway: the first relay creates the stream. A locked-down gateway's
            # operator creates it (`parley gateway-config --create-stream`).
            await self._js.add_stream(gateway_stream(self._root))

    def _jetstream(self) -> JetStreamContext:
        if self._js is None:
            raise RuntimeError("the gateway is not connected yet")
        return self._js

    async def close(self) -> None:
        if self._nc is not None and not self._nc.is_closed:
            await self._nc.close()

    async def send(self, recipient: str, frame: bytes, msg_id: str) -> asyncio.Future[PubAck]:
        """Send one frame now; the future resolves once the gateway stored it.

        Raises:
            MessageTooLarge: the frame and its headers exceed the gateway's `max_payload`
                (deterministic: retrying cannot make it fit, so the relay dead-letters it at
                once instead of retrying a forward that never gives up).
        """
        if self._acks is None:
            raise RuntimeError("the gateway is not connected yet")
        headers = {"Nats-Msg-Id": msg_id, "Nats-Expected-Stream": self.stream}
        return await self._acks.publish(self.subject(recipient, self._device), frame, headers)

    async def read(
        self, handle: Callable[[Msg], Awaitable[None]], running: Callable[[], bool]
    ) -> None:
        """Hand each frame addressed to this device to `handle` (which acks it) until
        `running()` is false; a frame whose handler raises is given again later."""
        js = self._jetstream()
        durable = f"relay-{self._device[:16]}"
        sub = await js.pull_subscribe(
            self.subject(self._device, "*"),
            durable=durable,
            stream=self.stream,
            config=ConsumerConfig(
                durable_name=durable,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=self._ack_wait,
                max_deliver=-1,
            ),
        )
        # nats-py's fetch shares one reply inbox between fetches: a late 408 of one is taken
        # by the next, whose lingering request then holds the next frame until it expires
        # (turns over the relay stalled up to a second). The bus's puller gives each pull
        # request a reply subject of its own (bus/_puller.py); the subscription above only
        # created or bound the durable.
        await sub.unsubscribe()
        if self._nc is None:
            raise RuntimeError("the gateway is not connected yet")
        puller = Puller(
            self._nc,
            f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{durable}",
            expires_s=_FETCH_EXPIRES_S,
            heartbeat_s=_FETCH_HEARTBEAT_S,
            link=self._link,
        )
        await puller.start()
        log.info("gateway ready", extra={"subject": self.subject(self._device, "*")})
        try:
            while running():
                try:
                    msgs = await puller.fetch(_BATCH)
                except PullRefusedError as exc:
                    log.warning("gateway fetch refused", extra={"error": str(exc)})
                    await asyncio.sleep(_FETCH_EXPIRES_S)  # a pause before asking again
                    continue
                if msgs:
                    await self._handle_all(msgs, handle)
        finally:
            await puller.close()

    async def _handle_all(
        self, msgs: Sequence[Msg], handle: Callable[[Msg], Awaitable[None]]
    ) -> None:
        """Handle a fetched batch in order, vouching for the frames still in hand."""
        in_hand = _InHand(msgs)
        vouching = asyncio.create_task(in_hand.vouch(self._ack_wait / 3, self._max_handler_s))
        try:
            for msg in msgs:
                try:
                    await handle(msg)
                except Exception as exc:
                    log.warning("frame not handled, will retry", extra={"error": repr(exc)})
                    await msg.nak(delay=1.0)
                in_hand.handled += 1
        finally:
            vouching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await vouching
