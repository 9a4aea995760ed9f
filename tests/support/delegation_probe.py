"""An agent host that stops at a chosen point of a delegation, for tests that kill it there.

Run as a real process (`parley run support.delegation_probe:PausingHost --profile ...`) with
`PARLEY_TEST_PAUSE_AT` naming the point; the first time the host gets there it logs
`paused at <point>` and holds the message in hand, unacked, until a signal ends the process:

- `stored`: the wait is stored, no request sent yet;
- `between`: the first request is stored, the others are not;
- `answers`: every answer is recorded, the brain not yet asked again;
- `asking`: the step is claimed and the brain is being asked (the claim's renewals go on
  until the process dies);
- `chained`: the brain's next round is stored, none of its requests sent;
- `answered`: the answer to the call is stored in the wait, not yet sent;
- `begin`: the brain answered the call with requests, its wait not yet stored; here the
  handler goes on when the process gets SIGUSR1 (a test stops the process meanwhile, so
  another handles the call, then lets this one meet what that one stored).

A test subclass, so no production handler carries a hook for it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from typing import Any, ClassVar

from actors.agent import AgentHost
from actors.agent._delegating import Ask, Delegator
from actors.agent._step_claim import StepClaim
from actors.delegation import Wait
from bus import Context
from schemas import AnyEnvelope, DelegationRequest, SubAgentCall

__all__ = ("PausingHost",)

log = logging.getLogger("parley.test.delegation_probe")


class PausingDelegator(Delegator):
    _paused = False
    _requests_sent = 0

    async def _pause(self, ctx: Context, point: str) -> None:
        if self._paused or os.environ.get("PARLEY_TEST_PAUSE_AT") != point:
            return
        type(self)._paused = True
        await ctx.outbox.settle(30.0)
        log.warning("paused at %s", point)
        await asyncio.Event().wait()  # never set: only a signal ends this handler

    async def begin(self, ctx: Context, *args: Any, **kwargs: Any) -> None:
        if not self._paused and os.environ.get("PARLEY_TEST_PAUSE_AT") == "begin":
            type(self)._paused = True
            go_on = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, go_on.set)
            log.warning("paused at begin")
            await go_on.wait()
        await super().begin(ctx, *args, **kwargs)

    async def _send(self, ctx: Context, wait: Wait) -> None:
        await self._pause(ctx, "chained" if wait.rounds else "stored")
        await super()._send(ctx, wait)

    async def _publish_for_call(
        self, ctx: Context, wait: Wait, envelope: AnyEnvelope, until_ms: int | None = None
    ) -> None:
        if wait.final:
            await self._pause(ctx, "answered")
        await super()._publish_for_call(ctx, wait, envelope, until_ms)
        if isinstance(envelope, DelegationRequest | SubAgentCall):
            type(self)._requests_sent += 1
            if self._requests_sent == 1:
                await self._pause(ctx, "between")

    async def _resume(self, ctx: Context, wait: Wait, revision: int, ask: Ask) -> None:
        await self._pause(ctx, "answers")
        await super()._resume(ctx, wait, revision, ask)

    async def _go_on(
        self, ctx: Context, held: StepClaim, ask: Ask, renewing: asyncio.Task[None]
    ) -> None:
        await self._pause(ctx, "asking")
        await super()._go_on(ctx, held, ask, renewing)


class PausingHost(AgentHost):
    kind: ClassVar[str] = "pausing-agent"
    delegator_class: ClassVar[type[Delegator]] = PausingDelegator
