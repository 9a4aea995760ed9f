"""The echo actor: answers each message or call it is delivered with an `agent_response`.

A diagnostic actor, like `nats reply` for Parley: it proves a deployment end to end (gate in,
gate out), gives the benchmarks a handler that costs nothing, and shows the smallest correct
actor. Its answer's id derives from the call's id, so a redelivery never answers twice.
"""

from __future__ import annotations

from typing import ClassVar

from bus import Actor, Context
from schemas import AgentCall, AgentResponse, AnyEnvelope, HumanMessage, Reply, utc_now

__all__ = ("EchoActor",)


class EchoActor(Actor):
    """Echo each human message's or agent call's text back to its sender through the gate."""

    kind: ClassVar[str] = "echo"

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        if not isinstance(envelope, HumanMessage | AgentCall):
            # Answering answers (responses, errors, events) would let two echoes, or an echo
            # and a gate refusing it, talk for ever.
            return
        text = envelope.text or "(empty)"  # a reply's message may not be empty
        reply = AgentResponse(
            id=ctx.derive_id("echo"),
            created_at=utc_now(),
            sender=self.actor_id,
            target=ctx.sender or "router",
            text=text,
            call_id=envelope.call_id,
            session_id=envelope.session_id,
            reply=Reply(message=text, final=True),
            attempt=ctx.attempt,
        )
        await ctx.submit(reply)
