"""What an answer to `parley delegate` means: seed 003's status and what a terminal shows.

Pure: an answer (a `delegation_response`, or an `error` about the request from the agent or
the gate) becomes an `Outcome` for the request it answers, and a request still unanswered
past its deadline plus `MARGIN_S` becomes seed 003's "Delegation timeout after Nms".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from nats.aio.msg import Msg

from actors.delegation import RequestResult, answered_request
from bus import SENDER
from schemas import DecodeError, DelegationResponse, Error, decode_envelope
from tools._interactions import seconds

__all__ = ("MARGIN_S", "Outcome", "Pending", "answer_in", "render", "timeout_outcome")

MARGIN_S: Final = 2.0
"""Past a request's deadline: the answer made at the deadline still crosses the gate."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one target made of its request: seed 003's status and what to show for it."""

    target: str
    result: RequestResult
    detail: str
    """How it ended, in brackets after the status: tokens and time, or why there is no answer."""


@dataclass(frozen=True, slots=True)
class Pending:
    target: str
    deadline_ms: int
    sent_at: float
    """The event loop's clock when the request was submitted."""

    @property
    def due(self) -> float:
        """When to stop waiting for the answer, on the same clock."""
        return self.sent_at + self.deadline_ms / 1000 + MARGIN_S


def render(outcome: Outcome) -> str:
    """The lines a terminal shows for one answer: seed 004's `coder returned: SUCCESS (…)`
    and the text, indented."""
    head = f"{outcome.target} returned: {outcome.result.status.upper()} ({outcome.detail})"
    body = [f"    {line}" for line in outcome.result.content.splitlines()]
    return "\n".join([head, *body])


def _response_outcome(target: str, answer: DelegationResponse, elapsed_ms: int) -> Outcome:
    shown = answer.result or answer.summary
    if answer.error:
        shown = f"{shown}\nerror: {answer.error}".strip()
    took = answer.duration_ms if answer.duration_ms is not None else elapsed_ms
    result = RequestResult(
        request_id=answer.request_id,
        status=answer.status,
        content=shown,
        tokens=answer.token_usage.total,
        duration_ms=took,
    )
    return Outcome(target, result, f"{result.tokens} tokens, {seconds(took)}")


def _error_outcome(target: str, error: Error, sender: str, elapsed_ms: int) -> Outcome:
    """An agent that could not answer, or a gate that refused the request (it is the sender of
    its refusals; an agent's own error is delivered as the agent's)."""
    result = RequestResult(
        request_id=error.cause_id or "",
        status="failed",
        content=f"{error.code}: {error.message}",
        duration_ms=elapsed_ms,
    )
    detail = "the agent could not answer" if sender == target else "refused by the gate"
    return Outcome(target, result, detail)


def timeout_outcome(request_id: str, pending: Pending) -> Outcome:
    result = RequestResult(
        request_id=request_id,
        status="timeout",
        content=f"Delegation timeout after {pending.deadline_ms}ms",  # seed 003's words
        duration_ms=pending.deadline_ms,
    )
    return Outcome(pending.target, result, "no answer")


def answer_in(msg: Msg, pending: dict[str, Pending], now: float) -> tuple[Outcome, str] | None:
    """The outcome `msg` brings for a request still pending, with that request's id, or None
    (it answers no request of ours, or does not decode)."""
    try:
        answer = decode_envelope(msg.data)
    except DecodeError:
        return None
    request_id = answered_request(answer)
    waiting = pending.get(request_id) if request_id is not None else None
    if request_id is None or waiting is None:
        return None
    elapsed_ms = int((now - waiting.sent_at) * 1000)
    if isinstance(answer, DelegationResponse):
        return _response_outcome(waiting.target, answer, elapsed_ms), request_id
    if isinstance(answer, Error):
        sender = (msg.headers or {}).get(SENDER, "")
        return _error_outcome(waiting.target, answer, sender, elapsed_ms), request_id
    return None
