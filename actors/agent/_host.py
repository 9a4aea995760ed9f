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
never a silent drop. Answers, errors and events delivered to the host are ignored (answering
an answer is how two agents talk for ever), but for the answers to requests its own brain
made: when a profile offers the brain other agents, a brain may ask them first, and the
host carries the call through their answers durably (actors/agent/_delegating.py).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import msgspec

from actors.agent._delegating import Delegator, Resumed
from actors.agent._model_calls import ModelCalls, current_turn, enter_turn
from actors.agent._profile import DEFAULT_AGENTS_DIR, AgentProfile, load_profile
from actors.agent._prompt import BrainCall, call_for
from actors.agent._provenance import sources_of
from actors.agent._reply import interpret_reply
from actors.agent._subcontext import SubContexts
from actors.agent.brains._protocol import BrainAnswer, BrainError
from actors.agent.brains._registry import make_brain
from actors.delegation import ToolRound, Wait, answered_request, open_wait_store
from bus import Actor, BusHandle, ConfigError, Context, Input, Settings
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
    derive_id,
    encode,
    profile_key,
    utc_now,
)

__all__ = ("AgentHost",)

log = logging.getLogger("parley.actors.agent")

_Call = AgentCall | DelegationRequest | SubAgentCall
_CALL_KINDS = (AgentCall, DelegationRequest, SubAgentCall)


def _call_id_of(envelope: _Call) -> str:
    """The call's own id (what a caller matches the answer by), whichever kind carried it."""
    return envelope.request_id if isinstance(envelope, DelegationRequest) else envelope.call_id


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
    delegator_class: ClassVar[type[Delegator]] = Delegator

    def __init__(self, settings: Settings) -> None:
        self.profile: AgentProfile = _profile_for(settings)
        # The actor id defaults to the profile's name, everywhere the runtime uses it: the
        # settings the base class is given already say so, and it derives `actor_id` from them.
        super().__init__(
            settings.model_copy(update={"actor_id": settings.actor_id or self.profile.name})
        )
        self.brain = make_brain(self.profile)
        self._timers = self.namespace.agent_timers(self.actor_id)
        self._delegator: Delegator | None = None
        self.model_calls = ModelCalls()  # the gateway brain's, awaiting their answers

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
        if self.profile.makes_requests:
            contexts = SubContexts(self.profile.workspace_root, self.profile.name)
            self._delegator = self.delegator_class(
                self.actor_id,
                await open_wait_store(bus, self.actor_id),
                self._timers,
                contexts.context_for,
                lease_s=self.settings.ack_wait_s,
            )
        log.info(
            "profile registered",
            extra={"profile": self.profile.name, "backend": self.brain.backend},
        )

    async def stop(self) -> None:
        await self.brain.close()

    def inputs(self) -> Sequence[Input]:
        """Its deliveries, and when its brain may call agents, its deadline reminders."""
        own = Input.deliver(self.namespace, self.actor_id)
        if not self.profile.makes_requests:
            return (own,)
        return (own, Input.agent_timers(self.namespace, self.actor_id))

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        if self.model_calls.settle(envelope):
            return
        enter_turn(ctx, envelope, self.model_calls)
        delegator = self._delegator
        if delegator is not None:
            if ctx.subject == self._timers:
                await delegator.on_reminder(ctx, self._ask_again)
                return
            if not isinstance(envelope, _CALL_KINDS) and answered_request(envelope):
                await delegator.on_answer(envelope, ctx, self._ask_again)
                return
        if not isinstance(envelope, _CALL_KINDS):
            return  # never answer an answer, an error or an event
        if delegator is not None and await delegator.resume_call(ctx, self._ask_again):
            return
        call = self._call_for(envelope, ctx.attempt, ())
        log.info("call received", extra={"call_id": call.call_id, "attempt": ctx.attempt})
        log.info("brain asked", extra={"call_id": call.call_id, "step": 0})
        started = time.monotonic()
        try:
            answer = await self.brain.reply(call)
        except BrainError as exc:
            await ctx.submit(self._error(envelope, call, exc.code, exc.message, exc.retryable))
            return
        except Exception as exc:  # a backend's bug still owes the caller an answer
            log.exception("brain crashed", extra={"call_id": call.call_id})
            await ctx.submit(
                self._error(envelope, call, ErrorCode.INTERNAL_ERROR, repr(exc), False)
            )
            return
        if answer.requests and delegator is not None:
            began = int(time.time() * 1000) - int((time.monotonic() - started) * 1000)
            await delegator.begin(ctx, answer.requests, answer.text, answer.usage.total, began)
            return
        reply = self._answer(envelope, ctx.sender, ctx.attempt, answer, time.monotonic() - started)
        await ctx.submit(reply)

    def _call_for(self, envelope: _Call, attempt: int, rounds: tuple[ToolRound, ...]) -> BrainCall:
        """The brain's question, offering the tools the profile allows while rounds remain."""
        call = call_for(envelope, attempt)
        profile = self.profile
        if not profile.makes_requests or len(rounds) >= profile.max_tool_rounds:
            return dataclasses.replace(call, rounds=rounds)
        sub_agents = profile.sub_agents if profile.allow_sub_agent_calls else ()
        return dataclasses.replace(
            call,
            rounds=rounds,
            delegates_to=profile.delegates_to,
            sub_agents=sub_agents,
            tools=profile.tools,
        )

    async def _ask_again(self, envelope: AnyEnvelope, wait: Wait) -> Resumed:
        """Ask the brain about a call again, with the rounds of requests it made so far."""
        if not isinstance(envelope, _CALL_KINDS):
            raise TypeError(f"a wait holds a {type(envelope).__name__}, not a call")
        call = self._call_for(envelope, 1, wait.rounds)
        if wait.rounds and any(result.session_ended for result in wait.rounds[-1].results):
            # Its person ended the session: every further step and model call would be
            # refused, and a brain asked again would only spend tokens asking for them.
            message = "its session has ended, so the agent stopped working on this call"
            error = self._error(envelope, call, ErrorCode.SESSION_EXPIRED, message, False)
            return Resumed(requests=(), text="", tokens=0, answer=error)
        log.info("brain asked", extra={"call_id": call.call_id, "step": len(wait.rounds)})
        turn = current_turn()
        if turn is not None:  # its model calls say where what it is shown came from
            turn.sources = sources_of(wait.rounds)
        try:
            answer = await self.brain.reply(call)
        except BrainError as exc:
            error = self._error(envelope, call, exc.code, exc.message, exc.retryable)
            return Resumed(requests=(), text="", tokens=0, answer=error)
        except Exception as exc:  # a backend's bug still owes the caller an answer
            log.exception("brain crashed", extra={"call_id": call.call_id})
            error = self._error(envelope, call, ErrorCode.INTERNAL_ERROR, repr(exc), False)
            return Resumed(requests=(), text="", tokens=0, answer=error)
        if answer.requests and call.offers_requests:
            return Resumed(answer.requests, answer.text, answer.usage.total, None)
        # The answer's total counts every brain call it took; prompt and completion are the
        # last call's.
        spent = msgspec.structs.replace(answer.usage, total=answer.usage.total + wait.tokens)
        reply = self._answer(
            envelope,
            wait.caller,
            1,
            dataclasses.replace(answer, usage=spent),
            time.time() - wait.started_ms / 1000 if wait.started_ms else 0.0,
            wait.answer_status,
            wait.tools_used,
        )
        return Resumed(requests=(), text="", tokens=answer.usage.total, answer=reply)

    def _answer(
        self,
        envelope: _Call,
        caller: str,
        attempt: int,
        answer: BrainAnswer,
        elapsed: float,
        status: str = "success",
        tools_used: tuple[str, ...] = (),
    ) -> AgentResponse | DelegationResponse | SubAgentResult:
        """The answer to `envelope` from the brain's final text, checked against the reply
        contract; its id derives from the call's, however many rounds it took."""
        # A handoff is judged by the router against the session's participants and the
        # profile's peers (sent with the answer), so a valid reply handing off to an agent that
        # is no peer ends the session naming that agent, not as a broken envelope.
        interpreted = interpret_reply(answer.text, delegate=isinstance(envelope, DelegationRequest))
        if interpreted.malformed:
            log.warning(
                "malformed reply; answered as a plain message without handoff",
                extra={"call_id": _call_id_of(envelope), "problem": interpreted.problem[:300]},
            )
        log.info(
            "answered",
            extra={
                "call_id": _call_id_of(envelope),
                "call_kind": envelope.__struct_config__.tag,
                "attempt": attempt,
                "malformed": interpreted.malformed,
                "tokens": answer.usage.total,
            },
        )
        reply = interpreted.reply
        answer_id = derive_id(envelope.id, "reply")
        match envelope:
            case AgentCall():
                return AgentResponse(
                    id=answer_id,
                    created_at=utc_now(),
                    sender=self.actor_id,
                    target=caller or "router",
                    thread=envelope.thread,
                    text=reply.message,
                    call_id=envelope.call_id,
                    session_id=envelope.session_id,
                    round=envelope.round,
                    max_rounds=envelope.max_rounds,
                    reply=reply,
                    malformed=interpreted.malformed,
                    token_usage=answer.usage,
                    attempt=attempt,
                    tools_used=tools_used[:32],
                    peers=self.profile.peers[:64],
                )
            case DelegationRequest():
                report = interpreted.report
                summary = reply.message.splitlines()[0][:200] if reply.message else ""
                return DelegationResponse(
                    id=answer_id,
                    created_at=utc_now(),
                    request_id=envelope.request_id,
                    target_employee=self.actor_id,
                    summary=report.summary if report and report.summary else summary,
                    result=reply.message,
                    artifacts=report.artifacts if report else (),
                    new_facts=report.new_facts if report else (),
                    used_sources=report.used_sources if report else (),
                    confidence=report.confidence if report else None,
                    requires_followup=report.requires_followup if report else False,
                    token_usage=answer.usage,
                    duration_ms=int(elapsed * 1000),
                    child_session_id=envelope.child_session_id,
                    status="failed" if status == "failed" else status,  # type: ignore[arg-type]
                )
            case SubAgentCall():
                return SubAgentResult(
                    id=answer_id,
                    created_at=utc_now(),
                    call_id=envelope.call_id,
                    agent_name=self.actor_id,
                    success=status != "failed",
                    output=reply.message,
                    tokens_used=answer.usage.total,
                    duration_seconds=int(elapsed),
                )

    def _error(
        self, envelope: _Call, call: BrainCall, code: ErrorCode, message: str, retryable: bool
    ) -> Error:
        """The error that tells the caller this brain could not answer its call."""
        log.warning(
            "brain could not answer",
            extra={
                "call_id": call.call_id,
                "code": str(code),
                "retryable": retryable,
                "error": message,
            },
        )
        return Error(
            id=derive_id(envelope.id, "error"),
            created_at=utc_now(),
            code=code,
            message=f"agent {self.profile.name!r} ({self.brain.backend}) could not answer: "
            + message,
            retryable=retryable,
            details={
                "profile": self.profile.name,
                "backend": self.brain.backend,
                "call_id": call.call_id,
                "attempt": call.attempt,
            },
            cause_id=call.envelope_id,
        )
