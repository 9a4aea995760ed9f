"""Opening an orchestrated session as the person at Alice's terminal, on the deployments of
tools/_shared_deployments.py (`parley demo --shared`, `parley chaos --shared`, the relay
bench), and following it to its end.

The timeline tells how a session goes; it says nothing of a submission the gate refused,
which opens no session. So the person's error answers are followed too (tools/_refusals.py),
and a refusal ends the wait at once with `Refused` instead of a silence.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final

from nats.aio.msg import Msg

from bus import TraceHeaders
from schemas import (
    Error,
    HumanMessage,
    Orchestration,
    SessionEvent,
    decode_envelope,
    encode,
    new_id,
    utc_now,
)
from tools._refusals import Refusals
from tools._shared_deployments import Deployment

__all__ = ("PERSON", "Refused", "orchestrate")

PERSON: Final = "cli"
"""Who opens the sessions: the person at Alice's terminal."""
_END = ("session_completed", "session_failed", "session_canceled")


class Refused(Exception):
    """The session's opening message was answered with an error (the gate refused it)."""

    def __init__(self, error: Error) -> None:
        super().__init__(f"refused: {error.code.value}: {error.message}")
        self.error = error


async def orchestrate(
    alice: Deployment,
    objective: str,
    shared_agent: str,
    max_turns: int,
    silence_s: float = 60,
    refusals: Refusals | None = None,
) -> AsyncIterator[SessionEvent]:
    """Open a full_auto session as the person at Alice's terminal; yield its timeline (each
    event once) up to the event that ends it. `refusals`: the person's error answers, when
    the caller follows them for several sessions at once (else this session follows them).

    Raises:
        TimeoutError: no event for `silence_s`.
        Refused: the opening message was answered with an error.
    """
    spec = Orchestration(
        local_agent="local", shared_agent=shared_agent, mode="full_auto", max_turns=max_turns
    )
    msg = HumanMessage(
        id=new_id(),
        created_at=utc_now(),
        text=objective,
        call_id=new_id(),
        mode="orchestrate",
        session_id=new_id(),
        orchestration=spec,
    )
    news: asyncio.Queue[SessionEvent | Error] = asyncio.Queue()

    async def on_event(raw: Msg) -> None:
        event = decode_envelope(raw.data)
        if isinstance(event, SessionEvent):
            news.put_nowait(event)

    def on_refusal(answer: asyncio.Future[Error]) -> None:
        if not answer.cancelled():
            news.put_nowait(answer.result())

    nc, js = await alice.connect_as(PERSON)
    own = refusals is None
    refusals = refusals or Refusals()
    seen: set[str] = set()
    try:
        if own:
            await refusals.follow(js, alice.ns, PERSON)
        refusals.expect(msg.id).add_done_callback(on_refusal)
        await nc.subscribe(alice.ns.events(PERSON, msg.session_id or ""), cb=on_event)
        await nc.flush()
        headers = TraceHeaders(trace_id=msg.id, origin=PERSON).to_headers(msg.id)
        await js.publish(alice.ns.submit(PERSON), encode(msg), headers=headers)
        while True:
            item = await asyncio.wait_for(news.get(), silence_s)
            if isinstance(item, Error):
                raise Refused(item)
            if item.id not in seen:
                seen.add(item.id)
                yield item
                if item.event_type in _END:
                    return
    finally:
        refusals.forget(msg.id)
        if own:
            await refusals.close()
        await nc.close()
