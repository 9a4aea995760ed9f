"""What the gate tells a receiver about a sender and a call, in headers of the delivery,
which only the gate may write: the sender's role from the bundle in force, the tools a callee
may use, for a tool request the agents whose capabilities bound it and the session whose
workspace it works in, and for a model call made in a person's session that person and
session (the LLM gateway shows them the text as it is written, actors/llm/_typing.py)."""

from __future__ import annotations

from actors.gate._records import Position
from bus import BOUND_BY, OWNER, SENDER, SENDER_ROLE, SESSION, BundleStore
from schemas import AnyEnvelope, LlmRequest, ToolRequest, valid_token

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
    elif isinstance(envelope, LlmRequest) and _person_session(bundles, position):
        headers[OWNER], headers[SESSION] = position.origin, position.session_id
    return headers


def _person_session(bundles: BundleStore, position: Position) -> bool:
    """Whether `position`'s trace works in a session a person opened: the same test as for
    the person's timeline (actors/gate/_effects.py), so the text being written goes where
    the calls are told, and nowhere a sender's claim could point."""
    origin, session = position.origin, position.session_id
    return (
        bool(session)
        and valid_token(origin)
        and valid_token(session)
        and role_of(bundles, origin) == "person"
    )


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
