"""Model calls through the LLM gateway, from inside a brain's `reply()` (the `gateway` brain).

The brain sends an `llm_request` as an effect of the message the host is handling and awaits
the `llm_response` the gate delivers back to the host, which hands it over here
(`ModelCalls.settle`) before anything else looks at it. The host keeps handling other
messages meanwhile (`concurrent_handlers`), so the answer can arrive while the call waits.

Ids: a request's id derives from the handled message's id, its delivery attempt and the
model call's number within the handling. A redelivered message therefore asks again under a
new id: the answer to the earlier delivery's request may have come while no one waited (it is
dropped here), and JetStream would drop a second publish of the same id. Asking again costs
one more model call after a host crash; the gateway still answers each request once.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from dataclasses import dataclass, field

from bus import Context
from schemas import AnyEnvelope, Error, LlmResponse, SourceProvenance, derive_id

__all__ = ("ModelCalls", "Turn", "current_turn", "enter_turn")


@dataclass
class Turn:
    """The message a host is handling, as the brain's model calls need it."""

    ctx: Context
    session_id: str
    calls: ModelCalls
    count: int = 0
    sources: tuple[SourceProvenance, ...] = ()
    """Where the results the brain is shown in this handling came from
    (actors/agent/_provenance.py): its model calls' `context_metadata`."""

    def next_request_id(self) -> str:
        self.count += 1
        return derive_id(self.ctx.envelope_id, f"llm:{self.ctx.attempt}:{self.count}")


_TURN: ContextVar[Turn | None] = ContextVar("parley_model_turn", default=None)


def enter_turn(ctx: Context, envelope: AnyEnvelope, calls: ModelCalls) -> None:
    """Make `ctx` the message this task's model calls are effects of."""
    session = getattr(envelope, "session_id", None) or getattr(envelope, "child_session_id", None)
    _TURN.set(Turn(ctx, str(session or ctx.trace_id), calls))


def current_turn() -> Turn | None:
    return _TURN.get()


@dataclass
class ModelCalls:
    """The host's model calls awaiting their answers, by request id."""

    pending: dict[str, asyncio.Future[LlmResponse | Error]] = field(default_factory=dict)

    def expect(self, request_id: str) -> asyncio.Future[LlmResponse | Error]:
        future: asyncio.Future[LlmResponse | Error] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        return future

    def forget(self, request_id: str) -> None:
        self.pending.pop(request_id, None)

    def settle(self, envelope: AnyEnvelope) -> bool:
        """Hand a delivered answer to its waiting model call; True when it was one (a model
        answer no one waits for any more is dropped: its call was given up)."""
        if isinstance(envelope, LlmResponse):
            key = envelope.request_id
        elif isinstance(envelope, Error) and envelope.cause_id in self.pending:
            key = envelope.cause_id
        else:
            return False
        future = self.pending.pop(key, None)
        if future is not None and not future.done():
            future.set_result(envelope)
        return True
