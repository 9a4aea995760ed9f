"""What the gate tells a receiver about a sender and a call, in headers of the delivery,
which only the gate may write: the sender's role from the bundle in force, the tools a callee
may use, and for a tool request the agents whose capabilities bound it and the session whose
workspace it works in."""

from __future__ import annotations

from actors.gate._records import Position
from bus import BOUND_BY, SENDER, SENDER_ROLE, SESSION, BundleStore
from schemas import AnyEnvelope, ToolRequest

__all__ = ("ALLOWED_TOOLS", "role_of", "told_to_receiver")

ALLOWED_TOOLS = "Parley-Allowed-Tools"
"""Set on delivered calls: the tools the callee may use, narrowed along the chain."""


def told_to_receiver(
    bundles: BundleStore, envelope: AnyEnvelope, position: Position
) -> dict[str, str]:
    """The gate's headers about who sent `envelope` and what its call allows."""
    level = position.levels[-1]
    headers = {SENDER: position.sender}
    role = role_of(bundles, position.sender)
    if role:
        headers[SENDER_ROLE] = role
    if level.tools is not None and level.call_id == envelope.id:
        headers[ALLOWED_TOOLS] = ",".join(level.tools)
    if isinstance(envelope, ToolRequest):
        headers[BOUND_BY] = ",".join(level.bound_by or (position.sender,))
        headers[SESSION] = position.session_id or position.trace_id
    return headers


def role_of(bundles: BundleStore, sender: str) -> str:
    """What the receiver may let `sender` do beyond its own: `operator`, `person` or ''.

    The router lets the principal that opened a session, or an operator, steer it; it cannot
    read the policy bundle, so the gate says which profiles are operators.
    """
    bundle = bundles.bundle
    profile = bundle.profiles.get(sender) if bundle else None
    if profile is None:
        return ""
    if profile.operator:
        return "operator"
    return "person" if profile.speaks_for_person else ""
