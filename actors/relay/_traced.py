"""The relay's part in one OpenTelemetry trace across deployments (bus/_tracing.py makes the
spans).

The gateway between deployments is untrusted, so a frame's trace context never travels in
its clear headers: the sending relay seals the `traceparent` of a span made for the frame
into the signed, encrypted body (`FrameBody.traceparent`), and the receiving relay handles
the frame in a span continuing it and submits the envelope under that one. So the caller's
gate, relay, the owner's relay, gate and agent, and the answer's way back share one trace id,
parent by parent, and the gateway can neither read the trace id nor inject another.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from actors.relay._outbound import Outbound
from bus import carried_traceparent, continue_carried
from schemas import FrameBody

__all__ = ("carried", "frame_span", "frame_traceparent")


def carried(body: FrameBody) -> str:
    """The traceparent a frame's sender sealed into it; "" if it carries none."""
    return body.traceparent if isinstance(body.traceparent, str) else ""


def frame_traceparent(frame: Outbound, relay: str) -> str:
    """What the frame going out carries for its receiver to continue: a call's span while
    this relay traces; an answer's only when its call came with one, so a relay that never
    sends the field (an older one, or one not tracing) is never sent it. "" for none."""
    parent = frame.ctx.outbox.span  # None while tracing is off: nothing more to do
    if parent is None or (frame.forwarded is not None and not frame.forwarded.traced):
        return ""
    attributes = {
        "parley.frame": "call" if frame.shared is not None else "answer",
        "parley.peer_device": frame.out.peer,
        "parley.sender": relay,
        "messaging.system": "parley-relay",
    }
    if frame.shared is not None:
        attributes["parley.target"] = frame.shared.name
    kind = str(frame.envelope.__struct_config__.tag)
    return carried_traceparent(parent, kind, attributes)


def frame_span(body: FrameBody) -> AbstractContextManager[None]:
    """The span a received frame is handled in, continuing the sender's (nothing if the
    frame carries none or this relay does not trace)."""
    attributes = {
        "parley.frame": body.kind,
        "parley.peer_device": body.sender_device,
        "messaging.system": "parley-relay",
    }
    return continue_carried(carried(body), "relay_frame", attributes)
