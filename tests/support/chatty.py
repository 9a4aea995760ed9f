"""A test agent run as a real process (`parley run support.chatty:ChattyActor --id a`).

It does what the text it is given says, so a test can build call graphs through the real gate:

- a human message or call with text `call:<target>[:<rest>]`: call `<target>` with text `<rest>`;
- a human message `pingpong:<target>`: call `<target>` with text `pingpong`, and call it again
  each time its answer comes back (a ping-pong that never deepens);
- any other call: answer it with its own text;
- an error: log it (the test reads the gate's decisions).
"""

from __future__ import annotations

import logging
from typing import ClassVar

from bus import Actor, Context
from schemas import AgentCall, AgentResponse, AnyEnvelope, Error, HumanMessage, Reply, utc_now

log = logging.getLogger("parley.test.chatty")


class ChattyActor(Actor):
    kind: ClassVar[str] = "chatty"

    async def _call(self, ctx: Context, target: str, text: str) -> None:
        await ctx.submit(
            AgentCall(
                id=ctx.derive_id("call"),
                created_at=utc_now(),
                sender=self.actor_id,
                target=target,
                call_id=ctx.derive_id("call-id"),
                goal=f"{self.actor_id} asks {target}",
                text=text,
            )
        )

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        match envelope:
            case HumanMessage(text=text) if text.startswith("pingpong:"):
                await self._call(ctx, text.removeprefix("pingpong:"), "pingpong")
            case HumanMessage(text=text) | AgentCall(text=text) if text.startswith("call:"):
                _, target, *rest = text.split(":", 2)
                await self._call(ctx, target, rest[0] if rest else "")
            case AgentCall():
                answer = envelope.text or "ok"
                await ctx.submit(
                    AgentResponse(
                        id=ctx.derive_id("answer"),
                        created_at=utc_now(),
                        sender=self.actor_id,
                        target=ctx.sender,
                        text=answer,
                        call_id=envelope.call_id,
                        reply=Reply(message=answer),
                        attempt=ctx.attempt,
                    )
                )
            case AgentResponse(text="pingpong"):
                await self._call(ctx, ctx.sender, "pingpong")
            case Error():
                log.info("refused", extra={"code": str(envelope.code), "why": envelope.message})
            case _:
                pass
