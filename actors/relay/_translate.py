"""How an envelope crosses from one deployment into the other (pure).

Ids, senders and call ids mean something only inside the deployment that chose them, so the
relay never submits the remote envelope as it came: it builds a local one, with ids derived
from the remote one (the same on every redelivery, so a repeat is de-duplicated), the local
principal as sender, and the remote side's content. A remote caller's session id, trace and
user id stay on its side.
"""

from __future__ import annotations

import hashlib
import re

from actors.relay._tickets import CallTicket
from schemas import (
    AgentCall,
    AgentResponse,
    AnyEnvelope,
    DecodeError,
    Error,
    decode_envelope,
    derive_id,
    utc_now,
)

__all__ = (
    "RelayRefused",
    "answer_for_caller",
    "call_for_owner",
    "decode_remote",
    "owner_call_id",
    "session_of",
)

_SESSION = re.compile(r"[A-Za-z0-9_-]{1,128}")


class RelayRefused(ValueError):
    """A frame that opened but cannot be acted on. `reason`: `unsupported_kind`,
    `undecodable`, `unsolicited_answer`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def session_of(envelope: AnyEnvelope, trace_id: str) -> str:
    """The relay session an envelope travels in: its session, else its trace."""
    session = getattr(envelope, "session_id", None) or trace_id or envelope.id
    if _SESSION.fullmatch(session):
        return session
    return hashlib.sha256(session.encode()).hexdigest()[:32]


def decode_remote(data: bytes) -> AnyEnvelope:
    try:
        return decode_envelope(data)
    except DecodeError as exc:
        raise RelayRefused("undecodable", f"the sealed envelope does not decode: {exc}") from None


def owner_call_id(device: str, remote_id: str) -> str:
    """The id under which the owner's relay submits call `remote_id` from `device`: the same
    on every redelivery of its frame, so a frame given twice is de-duplicated."""
    return derive_id(f"{device}:{remote_id}", "relay-call")


def call_for_owner(remote: AnyEnvelope, device: str, principal: str, agent: str) -> AgentCall:
    """The call a remote device's call becomes in the owner's deployment."""
    if not isinstance(remote, AgentCall):
        raise RelayRefused("unsupported_kind", f"a {remote.__struct_config__.tag} is not a call")
    local_id = owner_call_id(device, remote.id)
    return AgentCall(
        id=local_id,
        created_at=utc_now(),
        sender=principal,
        target=agent,
        text=remote.text,
        call_id=derive_id(local_id, "call"),
        round=remote.round,
        max_rounds=remote.max_rounds,
        goal=remote.goal,
        transcript=remote.transcript,
        final_round=remote.final_round,
    )


def answer_for_caller(remote: AnyEnvelope, call_envelope_id: str, out: CallTicket) -> AnyEnvelope:
    """The answer a remote agent's answer becomes for the caller here: from the shared
    agent's local name, to the caller, about the caller's own call."""
    answer_id = derive_id(call_envelope_id, "relay-answer")
    if isinstance(remote, AgentResponse):
        return AgentResponse(
            id=answer_id,
            created_at=utc_now(),
            sender=out.shared,
            target=out.caller,
            text=remote.text,
            call_id=out.call_id,
            session_id=out.session_id,
            round=out.round,
            max_rounds=out.max_rounds,
            reply=remote.reply,
            malformed=remote.malformed,
            token_usage=remote.token_usage,
        )
    if isinstance(remote, Error):
        return Error(
            id=answer_id,
            created_at=utc_now(),
            code=remote.code,
            message=f"{out.shared}: {remote.message}",
            retryable=remote.retryable,
            details={"remote": True},
            cause_id=call_envelope_id,
        )
    raise RelayRefused("unsupported_kind", f"a {remote.__struct_config__.tag} is not an answer")
