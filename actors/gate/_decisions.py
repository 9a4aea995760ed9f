"""The record of one decision, as the gate publishes it on `parley.decisions.<sender>`: pure.

A decision names the envelope, where it sits (trace, hop, origin, chain, user), the rule that
decided it and the bundle in force, and a short preview; the auditor turns it into audit
records (actors/auditor/), and `parley trace` draws traces from them.
"""

from __future__ import annotations

from actors.gate._bundles import BundleStore
from actors.gate._plan import Deny
from actors.gate._records import Position
from schemas import AnyEnvelope, Decision, derive_id, utc_now

__all__ = ("decision_for", "tag")


def decision_for(
    sender: str,
    causation_id: str,
    envelope: AnyEnvelope,
    position: Position,
    rule: str,
    deny: Deny | None,
    *,
    basis: str,
    bundles: BundleStore,
    decided_by: str,
) -> Decision:
    """The decision about `envelope` from `sender`: admitted at `position` when `deny` is
    None, else refused by `rule`; its id derives from `basis` (the envelope's id unless set)."""
    bundle = bundles.bundle
    return Decision(
        id=derive_id(basis or envelope.id, "decision"),
        created_at=utc_now(),
        allowed=deny is None,
        code=deny.code if deny else None,
        rule=rule,
        message=deny.message if deny else "",
        limit=deny.limit if deny else None,
        value=deny.value if deny else None,
        sender=sender,
        target=position.target if deny is None else named(envelope),
        envelope_id=envelope.id,
        envelope_kind=tag(envelope),
        causation_id=causation_id,
        trace_id=position.trace_id,
        hop_count=position.hop if position.levels else 0,
        origin=position.origin,
        chain=position.chain,
        user_id=position.user_id,
        session_id=text_field(envelope, "session_id") or None,
        request_id=text_field(envelope, "request_id") or None,
        objective=text_field(envelope, "objective")[:500],
        preview=preview(envelope),
        bundle_version=bundle.version if bundle else None,
        bundle_hash=bundles.bundle_hash,
        decided_at=utc_now(),
        decided_by=decided_by,
    )


def tag(envelope: AnyEnvelope) -> str:
    return str(envelope.__struct_config__.tag)


def named(envelope: AnyEnvelope) -> str:
    for field in ("target", "target_employee"):
        value = getattr(envelope, field, None)
        if isinstance(value, str):
            return value
    return ""


def text_field(envelope: AnyEnvelope, name: str) -> str:
    value = getattr(envelope, name, None)
    return value if isinstance(value, str) else ""


def preview(envelope: AnyEnvelope) -> str:
    for field in ("text", "input", "output", "result", "message"):
        value = getattr(envelope, field, None)
        if isinstance(value, str) and value:
            return value[:200]
    return ""
