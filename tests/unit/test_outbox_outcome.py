"""An outbox's outcome reads every failed effect, so asyncio never logs one as unread."""

from __future__ import annotations

import asyncio
import gc
from typing import Any, cast

from nats.js.api import PubAck

from bus import AckInbox, Outbox
from bus._outbox import settle


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


async def test_settling_waits_for_late_answers_and_cancels_only_the_unanswered() -> None:
    """`settle` waits one effect at a time (bus/_outbox.py, `wait_all`): answers that come
    after the first still count, a refusal raises nothing there, and only what is still
    unanswered at the deadline is cancelled."""
    loop = asyncio.get_running_loop()
    outbox = Outbox(cast(AckInbox, None))
    futures: list[asyncio.Future[PubAck]] = [loop.create_future() for _ in range(4)]
    outbox.pending.extend(futures)
    answer = PubAck(stream="S", seq=1)
    loop.call_soon(futures[0].set_result, answer)
    loop.call_later(0.05, futures[2].set_exception, RuntimeError("refused"))
    loop.call_later(0.1, futures[1].set_result, answer)  # later than one after it
    started = loop.time()
    await settle([outbox], timeout=0.5)
    assert loop.time() - started >= 0.45  # waited for the last one until the deadline
    assert [f.cancelled() for f in futures] == [False, False, False, True]
    assert futures[1].result() is answer
    failure = outbox.outcome()
    assert failure is not None and "refused" in str(failure)
