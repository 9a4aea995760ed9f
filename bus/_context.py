"""What a handler knows about the message in hand, and how it publishes effects.

Handlers receive a decoded envelope and this small frozen context, never bytes. The sender
comes from where the broker guarantees it (the subject, or the gate's header on a subject only
the gate may write), never from the envelope.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bus._headers import TraceHeaders
from bus._outbox import Outbox
from schemas import AnyEnvelope, Namespace, derive_id, encode, hop_delta_for

__all__ = ("Context", "Deferral")


class Deferral:
    """A handler's request to see its message again later instead of having it acked."""

    __slots__ = ("delay_s",)

    def __init__(self) -> None:
        self.delay_s: float | None = None


@dataclass(frozen=True, slots=True)
class Context:
    """The delivery of one envelope to one handler."""

    actor_id: str
    namespace: Namespace
    subject: str
    stream: str
    sender: str
    envelope_id: str
    trace: TraceHeaders
    attempt: int
    stream_seq: int
    outbox: Outbox
    submit_subject: str
    headers: Mapping[str, str]
    """The message's raw headers: claims, for an actor (the gate) that checks them."""
    payload: bytes = b""
    """The message's bytes, for an actor that forwards an envelope unchanged (the gate)."""
    deferral: Deferral = field(default_factory=Deferral)

    @property
    def trace_id(self) -> str:
        return self.trace.trace_id

    @property
    def hop_count(self) -> int:
        return self.trace.hop_count

    @property
    def causation_id(self) -> str:
        return self.trace.causation_id

    @property
    def deadline_ms(self) -> int | None:
        return self.trace.deadline_ms

    def defer(self, delay_s: float) -> None:
        """Have this message delivered again in `delay_s` seconds instead of acked.

        For reminders (an input whose `max_deliver` is -1), and for the gate's envelope
        whose cause is still being recorded (which stops deferring before `max_deliver`:
        each deferral is a delivery): the effects published so far are still stored first,
        and a deferral is not a failure, so it is neither logged as one nor dead-lettered.
        """
        self.deferral.delay_s = max(delay_s, 0.0)

    def derive_id(self, purpose: str) -> str:
        """The id of this envelope's effect `purpose`: the same on every redelivery."""
        return derive_id(self.envelope_id, purpose)

    async def publish(
        self,
        subject: str,
        envelope: AnyEnvelope,
        *,
        hop_delta: int = 0,
        extra_headers: dict[str, str] | None = None,
    ) -> None:
        """Publish an effect caused by the envelope in hand (acked before the input is).

        The effect keeps the trace, records this envelope as its cause, sits `hop_delta` hops
        deeper, and is de-duplicated by its own id, so give it an id from `derive_id()`.
        """
        headers = self.trace.child(self.envelope_id, hop_delta).to_headers(envelope.id)
        if extra_headers:
            headers.update(extra_headers)
        await self.outbox.publish(subject, encode(envelope), headers)

    async def submit(self, envelope: AnyEnvelope) -> None:
        """Submit an effect to the gate on this actor's own submit subject.

        Its hop count is the one the gate will derive for its kind (a call one deeper, a
        return one shallower, anything else level: `schemas.hop_delta_for`).
        """
        await self.publish(self.submit_subject, envelope, hop_delta=hop_delta_for(envelope))
