"""An outbox's outcome reads every failed effect, so asyncio never logs one as unread."""

from __future__ import annotations

import asyncio
import gc
from typing import Any, cast

from nats.js.api import PubAck

from bus import AckInbox, Outbox


async def test_every_refused_effect_is_read_and_the_first_is_reported() -> None:
    loop = asyncio.get_running_loop()
    unread: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: unread.append(context))
    try:
        outbox = Outbox(cast(AckInbox, None))
        for reason in ("first 503", "second 503", "third 503"):
            future: asyncio.Future[PubAck] = loop.create_future()
            future.set_exception(RuntimeError(reason))
            outbox.pending.append(future)
        failure = outbox.outcome()
        assert failure is not None and "first 503" in str(failure)
        del outbox, future
        gc.collect()
    finally:
        loop.set_exception_handler(previous)
    assert unread == []
