"""Turning a fetched message into a job for the handlers: the only place bytes become Structs.

A message of an envelope input is decoded, its sender taken from where the broker guarantees
it (bus/_actor.py, `Input.sender_from`) and its trace headers parsed; anything wrong with it
is `BadInput`, which the runtime dead-letters at once (bus/_failures.py) instead of retrying.
A message of a raw input (`Input.raw`) is not decoded at all, so it can never be bad input.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from nats.aio.msg import Msg

from bus._ackinbox import AckInbox
from bus._actor import Input
from bus._context import Context
from bus._headers import SENDER, HeaderError, TraceHeaders, parse_trace_headers
from bus._outbox import Outbox
from bus._settings import Settings
from schemas import (
    AnyEnvelope,
    DecodeError,
    Namespace,
    SubjectTokenError,
    check_token,
    decode_envelope,
)

__all__ = ("BadInput", "Intake", "Job")

_NO_HEADERS: Mapping[str, str] = MappingProxyType({})
_NO_TRACE = TraceHeaders(trace_id="")


class BadInput(Exception):
    """A message no handler should see: why (`reason`, a dead letter's reason) and details."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Job:
    """One message ready for its handler, with the context its effects go through."""

    msg: Msg
    envelope: AnyEnvelope | None
    """None for a message of a raw input."""
    ctx: Context


class Intake:
    """Prepares the messages of one actor's inputs for its handlers."""

    def __init__(self, actor_id: str, namespace: Namespace, settings: Settings) -> None:
        self._actor_id = actor_id
        self._namespace = namespace
        self._settings = settings
        self._submit_subject = namespace.submit(actor_id)

    def sender(self, spec: Input, subject: str, headers: Mapping[str, str] | None) -> str:
        """The message's trustworthy sender ("" when the header names none).

        Raises:
            BadInput: the subject names no sender.
            SubjectTokenError: the sender is not a valid subject token.
        """
        if spec.sender_from == "subject":
            parts = subject.split(".")
            if len(parts) < 3:
                raise BadInput("bad_subject", f"subject {subject!r} names no sender")
            return check_token(parts[2], "sender")
        claimed = (headers or {}).get(SENDER, "")
        return check_token(claimed, "sender") if claimed else ""

    def prepare(self, spec: Input, msg: Msg, inbox: AckInbox) -> Job:
        """Decode one message into a job for the handler, or raise `BadInput`."""
        if spec.raw:
            return self._prepare_raw(spec, msg, inbox)
        meta = msg.metadata
        try:
            envelope = decode_envelope(msg.data, max_bytes=self._settings.max_payload)
            sender = self.sender(spec, msg.subject, msg.headers)
            trace = parse_trace_headers(msg.headers, envelope.id, root_origin=sender)
        except DecodeError as exc:
            raise BadInput(f"decode_{exc.reason}", exc.detail) from None
        except HeaderError as exc:
            raise BadInput("bad_header", str(exc)) from None
        except SubjectTokenError as exc:
            raise BadInput("bad_sender", str(exc)) from None
        ctx = Context(
            actor_id=self._actor_id,
            namespace=self._namespace,
            subject=msg.subject,
            stream=spec.stream,
            sender=sender,
            envelope_id=envelope.id,
            trace=trace,
            attempt=meta.num_delivered or 1,
            stream_seq=meta.sequence.stream,
            outbox=self._outbox(inbox),
            submit_subject=self._submit_subject,
            headers=msg.headers or _NO_HEADERS,
            payload=msg.data,
        )
        return Job(msg, envelope, ctx)

    def _prepare_raw(self, spec: Input, msg: Msg, inbox: AckInbox) -> Job:
        """A job for `handle_raw()`: nothing decoded, nothing that could be bad input."""
        meta = msg.metadata
        seq = meta.sequence.stream
        ctx = Context(
            actor_id=self._actor_id,
            namespace=self._namespace,
            subject=msg.subject,
            stream=spec.stream,
            sender="",
            envelope_id=f"{spec.stream}:{seq}",
            trace=_NO_TRACE,
            attempt=meta.num_delivered or 1,
            stream_seq=seq,
            outbox=self._outbox(inbox),
            submit_subject=self._submit_subject,
            headers=msg.headers or _NO_HEADERS,
            payload=msg.data,
        )
        return Job(msg, None, ctx)

    def _outbox(self, inbox: AckInbox) -> Outbox:
        return Outbox(inbox, stall_s=self._settings.ack_wait_s / 2)
