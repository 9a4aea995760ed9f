"""An envelope on its way out to the gateway, numbered and ready to seal (pure).

A frame sent for a delivery here is numbered by that delivery's stream sequence in the
deliver stream: fixed before the relay ever sees the envelope, the same on every redelivery
(so a resent frame keeps its number and gateway msg id, and the gateway and the receiver's
replay window drop the copy), never given to two deliveries, and growing in the order the
deliveries were stored. Nothing has to be written before the frame goes.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.relay._store import Forwarded, Outgoing
from actors.relay._tickets import CallTicket
from bus import Context
from schemas import AgentCall, AnyEnvelope, SharedAgent

__all__ = ("Outbound", "call_ticket", "numbered_by_delivery")


@dataclass(frozen=True, slots=True)
class Outbound:
    """A call to `shared`, or the answer to the call `forwarded` brought in (one is set)."""

    envelope: AnyEnvelope
    ctx: Context
    out: Outgoing
    kem: str
    """The recipient device's X25519 key, the frame is encrypted to."""
    payload: bytes
    shared: SharedAgent | None = None
    forwarded: Forwarded | None = None


def numbered_by_delivery(
    ctx: Context, session: str, peer: str, *, hop_count: int = 0, ticket: bytes = b""
) -> Outgoing:
    """The frame the delivery `ctx` becomes, numbered by its deliver stream sequence."""
    return Outgoing(
        seq=ctx.stream_seq,
        session=session,
        peer=peer,
        numbered_by="deliveries",
        hop_count=hop_count,
        ticket=ticket,
    )


def call_ticket(call: AgentCall, ctx: Context, shared: SharedAgent) -> CallTicket:
    """What the answer to a call going out will need to reach its caller: its call id and
    its trace position (sealed into the frame, actors/relay/_tickets.py)."""
    return CallTicket(
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
