"""An envelope on its way out to the gateway, before its frame is numbered (pure).

The relay handles a fetched batch in two steps: it first works out what each envelope
becomes (a call to a shared agent, or the answer to a call that came in), then numbers the
whole batch's frames in one round trip to its bucket (actors/relay/_store.py) and sends them.
`Outbound` is what the first step hands the second.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.relay._store import Forwarded, Outgoing
from actors.relay._translate import session_of
from bus import Context
from schemas import AgentCall, AnyEnvelope, SharedAgent

__all__ = ("Outbound", "call_draft")


@dataclass(frozen=True, slots=True)
class Outbound:
    """A call to `shared`, or the answer to the call `forwarded` brought in (one is set)."""

    envelope: AnyEnvelope
    ctx: Context
    draft: Outgoing
    kem: str
    """The recipient device's X25519 key, the frame is encrypted to."""
    payload: bytes
    shared: SharedAgent | None = None
    forwarded: Forwarded | None = None


def call_draft(call: AgentCall, ctx: Context, shared: SharedAgent) -> Outgoing:
    """The record of a call going out: its session and peer, and what the answer will need
    to reach the caller (its call id, its trace position)."""
    return Outgoing(
        seq=0,
        session=session_of(call, ctx.trace_id),
        peer=shared.device.device_id,
        shared=shared.name,
        caller=ctx.sender,
        call_id=call.call_id,
        session_id=call.session_id,
        round=call.round,
        max_rounds=call.max_rounds,
        trace_id=ctx.trace_id,
        hop_count=ctx.hop_count,
        origin=ctx.trace.origin,
        deadline_ms=ctx.deadline_ms,
    )
