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


def _text_of(envelope: AnyEnvelope) -> str:
    text = getattr(envelope, "text", "")
    return text if isinstance(text, str) and text else str(envelope.__struct_config__.tag)


class EchoActor(Actor):
    """Echo each human message's or agent call's text back to its sender through the gate."""

    kind: ClassVar[str] = "echo"

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        if not isinstance(envelope, HumanMessage | AgentCall):
            # Answering answers (responses, errors, events) would let two echoes, or an echo
            # and a gate refusing it, talk for ever.
            return
        text = _text_of(envelope)
        call_id = getattr(envelope, "call_id", envelope.id)
        session_id = envelope.session_id if isinstance(envelope, HumanMessage) else None
        reply = AgentResponse(
            id=ctx.derive_id("echo"),
            created_at=utc_now(),
            sender=self.actor_id,
            target=ctx.sender or "router",
            text=text,
            call_id=call_id if isinstance(call_id, str) else envelope.id,
            session_id=session_id,
            reply=Reply(message=text, final=True),
            attempt=ctx.attempt,
        )
        await ctx.submit(reply)
