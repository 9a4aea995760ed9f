"""The agent host: one process per agent profile, a brain behind seed 001's reply contract.

It reads its own deliver subject, asks its brain for each call it is given (a collaboration
turn, a delegation, a sub-agent call), checks the brain's text against the reply contract, and
submits the answer through the gate. Everything a brain may take long over runs concurrently
(`concurrent_handlers`), and the consumer loop keeps each such message in progress while it
waits (bus/_consumer.py), so a slow model is never mistaken for a dead host.

Exactly one answer per call, even across crashes: the answer's id derives from the call's id
(`ctx.derive_id`), so a host killed after its answer was stored and before it acked the call
re-answers the redelivered call with the same `Nats-Msg-Id`, and JetStream drops the copy.
A brain that cannot answer becomes an `error` envelope to the caller, with a retryable flag,
never a silent drop. Answers, errors and events delivered to the host are ignored: answering
an answer is how two agents talk for ever.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import ClassVar

from actors.agent._profile import DEFAULT_AGENTS_DIR, AgentProfile, load_profile
from actors.agent._prompt import BrainCall
from actors.agent._reply import InterpretedReply, interpret_reply
from actors.agent.brains._protocol import BrainAnswer, BrainError
from actors.agent.brains._registry import make_brain
from bus import Actor, BusHandle, ConfigError, Context, Settings
from schemas import (
    AgentCall,
    AgentResponse,
    AnyEnvelope,
    DelegationRequest,
    DelegationResponse,
    Error,
    ErrorCode,
    ProfileSummary,
    SubAgentCall,
    SubAgentResult,
    TranscriptItem,
    encode,
    profile_key,
    utc_now,
)

__all__ = ("AgentHost", "call_for")

log = logging.getLogger("parley.actors.agent")

_Call = AgentCall | DelegationRequest | SubAgentCall


def call_for(envelope: _Call, attempt: int) -> BrainCall:
    """The brain's question for one delivered call, whichever kind carried it."""
    match envelope:
        case AgentCall():
            return BrainCall(
                kind="agent_call",
                envelope_id=envelope.id,
                call_id=envelope.call_id,
                session_id=envelope.session_id,
                goal=envelope.goal,
                task=envelope.text,
                transcript=envelope.transcript,
                round=envelope.round,
                max_rounds=envelope.max_rounds,
                final_round=envelope.final_round,
                attempt=attempt,
            )
        case DelegationRequest():
            facts = tuple(
                TranscriptItem(role="router", name="fact", text=fact)
                for fact in envelope.handoff_data.facts
            )
            return BrainCall(
                kind="delegation_request",
                envelope_id=envelope.id,
                call_id=envelope.request_id,
                session_id=envelope.child_session_id or envelope.parent_session_id,
                goal=envelope.objective,
                task=envelope.input,
                transcript=facts,
                attempt=attempt,
            )
        case SubAgentCall():
            messages = tuple(
                TranscriptItem(role=m.role, name=m.role, text=m.content)
                for m in envelope.context.messages
            )
            task_input = "" if envelope.args.input is None else str(envelope.args.input)
            return BrainCall(
                kind="sub_agent_call",
                envelope_id=envelope.id,
                call_id=envelope.call_id,
                session_id=envelope.session_id,
                goal=envelope.args.task,
                task=task_input,
                transcript=messages,
                attempt=attempt,
            )


def _profile_for(settings: Settings) -> AgentProfile:
    """The profile a host runs: `[options] profile`, else the one named like the actor id.

    Raises:
        ConfigError: neither names one, or the profile cannot be loaded.
    """
    name = settings.options.get("profile") or settings.actor_id
    if not name:
        raise ConfigError("an agent host needs a profile: --profile NAME (or [options] profile)")
    agents_dir = Path(str(settings.options.get("agents_dir", DEFAULT_AGENTS_DIR)))
    return load_profile(str(name), agents_dir)


class AgentHost(Actor):
    """Runs one agent profile (`parley run agent --profile NAME`)."""

    kind: ClassVar[str] = "agent"
    concurrent_handlers: ClassVar[bool] = True

    def __init__(self, settings: Settings) -> None:
        self.profile: AgentProfile = _profile_for(settings)
        # The actor id defaults to the profile's name, everywhere the runtime uses it: the
        # settings the base class is given already say so, and it derives `actor_id` from them.
        super().__init__(
            settings.model_copy(update={"actor_id": settings.actor_id or self.profile.name})
        )
        self.brain = make_brain(self.profile)

    async def start(self, bus: BusHandle) -> None:
        """Start the brain, then say who we are in the registry (the router reads it)."""
        await self.brain.start()
        summary = ProfileSummary(
            name=self.profile.name,
            actor_id=self.actor_id,
            backend=self.brain.backend,
            model=self.profile.model,
            description=self.profile.description,
            version=self.profile.version,
            capabilities=self.profile.capabilities,
            tools_allowed=self.profile.tools_allowed,
            allow_sub_agent_calls=self.profile.allow_sub_agent_calls,
            peers=self.profile.peers,
            written_at=utc_now(),
        )
        kv = await bus.js.key_value(bus.namespace.bucket("registry"))
        await kv.put(profile_key(self.profile.name), encode(summary))
        log.info(
            "profile registered",
            extra={"profile": self.profile.name, "backend": self.brain.backend},
        )

    async def stop(self) -> None:
        await self.brain.close()

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        if not isinstance(envelope, AgentCall | DelegationRequest | SubAgentCall):
            return  # never answer an answer, an error or an event
        call = call_for(envelope, ctx.attempt)
        log.info("call received", extra={"call_id": call.call_id, "attempt": ctx.attempt})
        started = time.monotonic()
        try:
            answer = await self.brain.reply(call)
        except BrainError as exc:
            await self._fail(ctx, call, exc.code, exc.message, retryable=exc.retryable)
            return
        except Exception as exc:  # a backend's bug still owes the caller an answer
            log.exception("brain crashed", extra={"call_id": call.call_id})
            await self._fail(ctx, call, ErrorCode.INTERNAL_ERROR, repr(exc), retryable=False)
            return
        interpreted = interpret_reply(answer.text, self.profile.peers)
        if interpreted.malformed:
            log.warning(
                "malformed reply; answered as a plain message without handoff",
                extra={"call_id": call.call_id, "problem": interpreted.problem[:300]},
            )
        elapsed = time.monotonic() - started
        await ctx.submit(self._answer(envelope, ctx, interpreted, answer, elapsed))
        log.info(
            "answered",
            extra={
                "call_id": call.call_id,
                "call_kind": call.kind,
                "attempt": ctx.attempt,
                "malformed": interpreted.malformed,
                "tokens": answer.usage.total,
            },
        )

    def _answer(
        self,
        envelope: _Call,
        ctx: Context,
        interpreted: InterpretedReply,
        answer: BrainAnswer,
        elapsed: float,
    ) -> AgentResponse | DelegationResponse | SubAgentResult:
        reply = interpreted.reply
        answer_id = ctx.derive_id("reply")
        match envelope:
            case AgentCall():
                return AgentResponse(
                    id=answer_id,
                    created_at=utc_now(),
                    sender=self.actor_id,
                    target=ctx.sender or "router",
                    thread=envelope.thread,
                    text=reply.message,
                    call_id=envelope.call_id,
                    session_id=envelope.session_id,
                    round=envelope.round,
                    max_rounds=envelope.max_rounds,
                    reply=reply,
                    malformed=interpreted.malformed,
                    token_usage=answer.usage,
                    attempt=ctx.attempt,
                )
            case DelegationRequest():
                return DelegationResponse(
                    id=answer_id,
                    created_at=utc_now(),
                    request_id=envelope.request_id,
                    target_employee=self.actor_id,
                    summary=reply.message.splitlines()[0][:200],
                    result=reply.message,
                    token_usage=answer.usage,
                    duration_ms=int(elapsed * 1000),
                    child_session_id=envelope.child_session_id,
                    status="success",
                )
            case SubAgentCall():
                return SubAgentResult(
                    id=answer_id,
                    created_at=utc_now(),
                    call_id=envelope.call_id,
                    agent_name=self.actor_id,
                    success=True,
                    output=reply.message,
                    tokens_used=answer.usage.total,
                    duration_seconds=int(elapsed),
                )

    async def _fail(
        self, ctx: Context, call: BrainCall, code: ErrorCode, message: str, *, retryable: bool
    ) -> None:
        log.warning(
            "brain could not answer",
            extra={
                "call_id": call.call_id,
                "code": str(code),
                "retryable": retryable,
                "error": message,
            },
        )
        error = Error(
            id=ctx.derive_id("error"),
            created_at=utc_now(),
            code=code,
            message=f"agent {self.profile.name!r} ({self.brain.backend}) could not answer: "
            + message,
            retryable=retryable,
            details={
                "profile": self.profile.name,
                "backend": self.brain.backend,
                "call_id": call.call_id,
                "attempt": ctx.attempt,
            },
            cause_id=call.envelope_id,
        )
        await ctx.submit(error)
