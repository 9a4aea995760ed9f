"""An agent host that stalls a call before answering it, for tests that kill it mid-call.

Run as a real process (`parley run support.replica_probe:StallingHost --profile ...`). A call
whose goal starts with `[stall]` is held, on its first delivery only, before the brain is
asked: the call is in hand and nothing is stored for it yet, until a signal ends the process.
A later delivery (to this replica or another one) is answered as any host answers it. A test
subclass, so no production handler carries a hook for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import ClassVar

from actors.agent import AgentHost
from bus import Context
from schemas import AgentCall, AnyEnvelope

__all__ = ("STALL", "StallingHost")

log = logging.getLogger("parley.test.replica_probe")

STALL = "[stall]"
"""The goal prefix of a call the host stalls, unanswered, on its first delivery."""


class StallingHost(AgentHost):
    kind: ClassVar[str] = "stalling-agent"

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        if isinstance(envelope, AgentCall) and envelope.goal.startswith(STALL) and ctx.attempt == 1:
            log.warning("stalling the call before answering it", extra={"id": envelope.id})
            await asyncio.Event().wait()  # never set: only a signal ends this handler
        await super().handle(envelope, ctx)
