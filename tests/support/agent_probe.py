"""An agent host that holds a call once its reply is stored, for tests that kill it there.

Run as a real process (`parley run support.agent_probe:HoldingHost --profile ...`). A call
whose goal starts with `[hold]` is answered as any host answers it; then, on its first
delivery, the host keeps it in hand, unacked, until a signal ends the process: exactly the
window between an effect and its input's ack. A test subclass, so no production handler
carries a hook for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import ClassVar

from actors.agent import AgentHost
from bus import Context
from schemas import AgentCall, AnyEnvelope

__all__ = ("HOLD", "HoldingHost")

log = logging.getLogger("parley.test.agent_probe")

HOLD = "[hold]"
"""The goal prefix of a call the host holds after replying."""


class HoldingHost(AgentHost):
    kind: ClassVar[str] = "holding-agent"

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        await super().handle(envelope, ctx)
        if isinstance(envelope, AgentCall) and envelope.goal.startswith(HOLD) and ctx.attempt == 1:
            await ctx.outbox.settle(self.settings.ack_wait_s)
            log.warning("holding the call after its reply was stored", extra={"id": envelope.id})
            await asyncio.Event().wait()  # never set: only a signal ends this handler
