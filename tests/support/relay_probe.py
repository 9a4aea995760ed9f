"""A relay that holds a frame once its effect is stored, for tests that kill it there.

Run as a real process (`parley run support.relay_probe:HoldingRelay`). With
`PARLEY_RELAY_HOLD=out` it holds each call it sent to the gateway, before acking the delivery
it came from; with `PARLEY_RELAY_HOLD=in` it holds each call it submitted into its deployment,
before marking the replay window and acking the gateway: exactly the windows between an
effect and its input's ack. With `PARLEY_RELAY_HOLD=slow` it holds each call it submitted
until the test sends it SIGUSR1 (once the test has seen whatever must be ready beside it, such
as a replica: a fixed hold raced a replica slow to start), then takes `PARLEY_RELAY_SLOW_S`
seconds more (a relay slower than the gateway's ack wait) and goes on. A test subclass, so no
production path carries a hook for it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Sequence
from typing import ClassVar

from nats.js.api import PubAck

from actors.relay import RelayActor
from actors.relay._store import Outgoing
from schemas import FrameBody, ShareRecord

__all__ = ("HoldingRelay",)

log = logging.getLogger("parley.test.relay_probe")


class HoldingRelay(RelayActor):
    kind: ClassVar[str] = "holding-relay"

    async def _seal_and_send(
        self, out: Outgoing, kem: str, kind: str, agent: str, in_reply_to: str, payload: bytes
    ) -> asyncio.Future[PubAck]:
        stored = await super()._seal_and_send(out, kem, kind, agent, in_reply_to, payload)
        if kind == "call" and os.environ.get("PARLEY_RELAY_HOLD") == "out":
            await stored
            log.warning("holding the call after the gateway stored it", extra={"seq": out.seq})
            await asyncio.Event().wait()  # never set: only a signal ends this handler
        return stored

    async def _submit_call(self, body: FrameBody, shares: Sequence[ShareRecord]) -> None:
        await super()._submit_call(body, shares)
        if os.environ.get("PARLEY_RELAY_HOLD") == "slow":
            released = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, released.set)
            log.warning("slow over a frame", extra={"seq": body.seq})
            await released.wait()
            await asyncio.sleep(float(os.environ["PARLEY_RELAY_SLOW_S"]))  # the slowness itself
            log.warning("done with the slow frame", extra={"seq": body.seq})
        if os.environ.get("PARLEY_RELAY_HOLD") == "in":
            log.warning("holding the frame after its call was submitted", extra={"seq": body.seq})
            await asyncio.Event().wait()
