"""A router that stops dead at a chosen point of a turn, so a test can SIGKILL it there.

Run as `parley run support.router_probe:HangingRouter`. On the first delivery of an agent
answer whose text is `hang-after-store`, it stores the transition (compare-and-set) and then
never publishes its effects; on `hang-after-effects` it stores, publishes and waits until
JetStream has the effects, and then never acks. Those are the two windows a crash can hit
between a stored state and an acked input.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from actors import RouterActor
from actors.router._effects import Emitted
from bus import Context
from schemas import AgentResponse, Control, Error

HANG_AFTER_STORE = "hang-after-store"
HANG_AFTER_EFFECTS = "hang-after-effects"


class HangingRouter(RouterActor):
    kind: ClassVar[str] = "hanging-router"

    async def _advance(
        self, envelope: AgentResponse | Error | Control, session_id: str, ctx: Context
    ) -> Emitted:
        step = await super()._advance(envelope, session_id, ctx)
        if not isinstance(envelope, AgentResponse) or ctx.attempt > 1:
            return step
        if envelope.text == HANG_AFTER_STORE:
            print("stored, effects not published", flush=True)  # noqa: T201 - the test waits for it
            await asyncio.Event().wait()  # never set: the test kills the process here
        if envelope.text == HANG_AFTER_EFFECTS:
            await self._emit(step, ctx)
            await ctx.outbox.settle(5.0)
            print("stored and effects published, not acked", flush=True)  # noqa: T201
            await asyncio.Event().wait()
        return step
