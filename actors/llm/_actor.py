"""The LLM gateway (`parley run llm`): the one place provider keys live (seed 002 §3.3, §8.2).

For each `llm_request` the gate delivers (the gate checked the model allowlist and the
prompt's size before), it answers one `llm_response` through the gate, which routes it back
to the agent host that asked and charges its trace with the usage the provider reported:

1. An answer already stored for this request id is published again, and that is all
   (actors/llm/_answers.py): a request is never answered twice.
2. The policy is its own finding: it verifies the signed bundle itself and applies the same
   checks as the gate (actors/llm/_policy.py), then caps the answer's length.
3. The request guardrails run (actors/llm/_guardrails.py): secrets redacted, tool output
   marked as data, the bundle's deny and redact rules.
4. The provider that serves the model is called (actors/llm/_provider.py), with retries
   and backoff for 429 and 5xx within the call's deadline. A request with `stream` reads
   the provider's stream (actors/llm/_stream.py), its text sent on to the caller as it comes
   (actors/llm/_chunks.py); the deadline cuts a stream that stalls.
5. The response guardrails run on the answer; an answer whose reported completion tokens
   exceed the cap is refused (the tokens it spent are still reported, so still charged).
6. The answer is stored, then published.

A request the gateway cannot serve ends `denied` (policy, guardrails) or `failed` (provider
error, timeout, unknown model) with a typed error, never a dead gateway.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import msgspec

from actors.llm._answers import AnswerStore, answer_key
from actors.llm._chunks import ChunkSender
from actors.llm._guardrails import guard, ungranted_tools
from actors.llm._options import LlmOptions
from actors.llm._policy import check_llm_policy, output_cap
from actors.llm._provider import ProviderClient, ProviderFailure
from actors.llm._typing import TypingSender
from actors.llm._wire import read_answer, request_body
from bus import (
    ORIGIN,
    OWNER,
    SESSION,
    Actor,
    BundleStore,
    BusHandle,
    ConfigError,
    Context,
    EndedSessions,
    Input,
    Payer,
    Settings,
    ShareExceeded,
    asked_at_start,
    load_public_keys,
    validated_options,
)
from schemas import (
    AnyEnvelope,
    Error,
    ErrorCode,
    GuardrailOutcome,
    LlmError,
    LlmRequest,
    LlmResponse,
    LlmUsage,
    decode_envelope,
    encode,
    utc_now,
    valid_token,
)

__all__ = ("LlmActor",)

log = logging.getLogger("parley.actors.llm")


class _Refused(Exception):
    """The gateway will not (denied) or could not (failed) answer with the model's text."""

    def __init__(
        self,
        status: Literal["failed", "denied"],
        code: ErrorCode,
        message: str,
        outcomes: list[GuardrailOutcome] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.outcomes = outcomes or []


class LlmActor(Actor):
    """Answers each delivered model call once, with the keys only it holds."""

    kind: ClassVar[str] = "llm"
    files_by_sender: ClassVar[bool] = True
    concurrent_handlers: ClassVar[bool] = True

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.options = validated_options(LlmOptions, settings.options, "llm")
        try:
            self._trusted = load_public_keys(self.options.policy_keys)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.bundles: BundleStore | None = None
        self._answers: AnswerStore | None = None
        self._sessions: EndedSessions | None = None
        self._providers: dict[str, ProviderClient] = {}
        self._bus: BusHandle | None = None

    def inputs(self) -> Sequence[Input]:
        return (Input.deliver(self.namespace, self.actor_id),)

    async def start(self, bus: BusHandle) -> None:
        ns = self.namespace
        self._bus = bus
        policy = await asked_at_start(
            bus.refusals, lambda: bus.js.key_value(ns.bucket("policy")), "the policy bucket"
        )
        self.bundles = BundleStore(policy, self._trusted, self.options.tenant, keeps_floor=False)
        await self.bundles.load()
        runs = await asked_at_start(
            bus.refusals, lambda: bus.js.key_value(ns.bucket("llm_runs")), "the LLM answers bucket"
        )
        self._answers = await AnswerStore.opened(runs, self.settings.quotas)
        self._sessions = EndedSessions(bus.js, ns)
        opts = self.options
        self._providers = {
            name: ProviderClient(name, settings, opts.retries, opts.backoff_s)
            for name, settings in opts.providers.items()
        }

    async def stop(self) -> None:
        for client in self._providers.values():
            await client.close()

    async def background(self, stopping: asyncio.Event) -> None:
        if self.bundles is not None:
            await self.bundles.watch(stopping)

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        if isinstance(envelope, Error):  # the gate refused an answer of ours: say why
            log.error("an llm_response was refused", extra={"error": envelope.message})
            return
        if not isinstance(envelope, LlmRequest):
            log.info("not an llm_request: ignored", extra={"kind": envelope.__struct_config__.tag})
            return
        answers = self._answers
        if answers is None:
            raise RuntimeError("the LLM gateway handled a message before it started")
        key = answer_key(ctx.sender, envelope.request_id)
        stored = await answers.find(key)
        if stored is not None:
            log.info("answered again from the store", extra={"request_id": envelope.request_id})
        if stored is None:
            payers = (Payer("person", ctx.headers.get(ORIGIN, "")), Payer("agent", ctx.sender))
            try:
                await answers.room_for(payers)
            except ShareExceeded as exc:  # no provider asked: refused, and nothing kept
                log.warning("model call refused: a share is full", extra={"why": str(exc)})
                refused = _Refused("failed", ErrorCode.RATE_LIMITED, f"not asked: {exc}")
                await ctx.submit(self._failed(envelope, ctx, "", refused, [], time.monotonic()))
                return
            answer = await self._answer(envelope, ctx)
            stored, kept = await answers.keep(key, encode(answer))
            again = decode_envelope(stored)
            await ctx.submit(msgspec.structs.replace(again, id=ctx.derive_id("llm_response")))
            if kept:
                await answers.charge(payers, stored)  # once the answer is on its way
            return
        again = decode_envelope(stored)
        await ctx.submit(msgspec.structs.replace(again, id=ctx.derive_id("llm_response")))

    async def _answer(self, request: LlmRequest, ctx: Context) -> LlmResponse:
        started = time.monotonic()
        outcomes: list[GuardrailOutcome] = []
        provider = ""
        chunks: ChunkSender | None = None
        try:
            body, provider, outcomes = self._prepared(request, ctx)
            await self._refuse_in_ended_session(ctx)
            deadline = started + self.options.timeout_s
            if ctx.deadline_ms is not None:
                deadline = min(deadline, started + ctx.deadline_ms / 1000 - time.time())
            log.info(
                "llm_request_started",
                extra={"model": request.model, "provider": provider, "sender": ctx.sender},
            )
            chunks = self._chunks(request, ctx, provider)
            on_text = chunks.text if chunks is not None else None
            raw = await self._providers[provider].complete(body, deadline, on_text)
            answer = self._response(request, ctx, provider, raw, outcomes, started)
        except _Refused as refused:
            outcomes = outcomes or refused.outcomes
            answer = self._failed(request, ctx, provider, refused, outcomes, started)
        except ProviderFailure as failure:
            cut = _Refused("failed", failure.code, failure.message)
            answer = self._failed(
                request, ctx, provider, cut, outcomes, started, retryable=failure.retryable
            )
        if chunks is not None:
            await chunks.finish(answer.text if answer.status == "succeeded" else None)
        return answer

    async def _refuse_in_ended_session(self, ctx: Context) -> None:
        """No provider is called for a session its person ended (bus/_session_ends.py): an
        agent's brain goes on asking until its turn ends.

        Raises:
            _Refused: the session has ended.
        """
        owner, session = ctx.headers.get(OWNER, ""), ctx.headers.get(SESSION, "")
        if self._sessions is None or not (valid_token(owner) and valid_token(session)):
            return
        how = await self._sessions.ended(owner, session)
        if how is not None:
            raise _Refused(
                "denied",
                ErrorCode.SESSION_EXPIRED,
                f"session {session} has ended ({how}): no model call runs in it any more",
            )

    def _chunks(self, request: LlmRequest, ctx: Context, provider: str) -> ChunkSender | None:
        """Where a streamed call's text goes as it is written (actors/llm/_chunks.py)."""
        bundle = self.bundles.bundle if self.bundles else None
        if not request.stream or self._bus is None or bundle is None:
            return None
        subject = self.namespace.chunks(ctx.sender)
        api = self.options.providers[provider].api
        typing = None
        owner, session = ctx.headers.get(OWNER), ctx.headers.get(SESSION)
        if owner and session and valid_token(owner) and valid_token(session):
            to_person = self.namespace.typing(owner, session)  # the gate's word: whose session
            typing = TypingSender(self._bus.nc, to_person, request.request_id, ctx.sender)
        return ChunkSender(
            self._bus.nc, subject, request.request_id, bundle.guardrails, api, typing
        )

    def _prepared(
        self, request: LlmRequest, ctx: Context
    ) -> tuple[dict[str, Any], str, list[GuardrailOutcome]]:
        """The provider's body, the provider's name and the request guardrails' outcomes."""
        bundle = self.bundles.bundle if self.bundles else None
        if bundle is None:
            problem = self.bundles.problem if self.bundles else "not started"
            raise _Refused("denied", ErrorCode.POLICY_BUNDLE_INVALID, f"no bundle: {problem}")
        refusal = check_llm_policy(bundle, ctx.sender, request)
        if refusal is not None:
            raise _Refused("denied", refusal.code, f"{refusal.rule}: {refusal.message}")
        provider = self.options.provider_for(request.model)
        if provider is None:
            raise _Refused(
                "failed", ErrorCode.INVALID_REQUEST, f"no provider serves model {request.model!r}"
            )
        api = self.options.providers[provider].api
        if api != request.api:
            raise _Refused(
                "failed",
                ErrorCode.INVALID_REQUEST,
                f"model {request.model!r} is served by {provider} over the {api} API; the "
                f"request speaks {request.api}",
            )
        guarded = guard(bundle.guardrails, "request", list(request.messages), api)
        options = guard(bundle.guardrails, "request", request.options, api)
        outcomes = guarded.outcomes + options.outcomes
        denied = guarded.denied_by or options.denied_by
        if denied is not None:
            raise _Refused(
                "denied",
                ErrorCode.LLM_GUARDRAIL_BLOCKED,
                f"the request matches guardrail {denied.rule_id}",
                outcomes,
            )
        body = request_body(
            api, request.model, guarded.value, options.value, output_cap(bundle, request)
        )
        return body, provider, outcomes

    def _response(
        self,
        request: LlmRequest,
        ctx: Context,
        provider: str,
        raw: dict[str, Any],
        outcomes: list[GuardrailOutcome],
        started: float,
    ) -> LlmResponse:
        bundle = self.bundles.bundle if self.bundles else None
        assert bundle is not None  # noqa: S101 - checked in _prepared
        api = self.options.providers[provider].api
        try:
            read = read_answer(api, raw)
        except ValueError as exc:
            refused = _Refused("failed", ErrorCode.AGENT_UNAVAILABLE, f"provider {provider}: {exc}")
            return self._failed(request, ctx, provider, refused, outcomes, started, True)
        cap = output_cap(bundle, request)
        if cap is not None and read.usage.completion_tokens > cap:
            refused = _Refused(
                "denied",
                ErrorCode.LLM_BUDGET_EXCEEDED,
                f"max_output_tokens: the provider reports {read.usage.completion_tokens} "
                f"completion tokens, over the cap of {cap}",
            )
            return self._failed(
                request, ctx, provider, refused, outcomes, started, usage=read.usage
            )
        guarded = guard(bundle.guardrails, "response", raw, api)
        outcomes = outcomes + guarded.outcomes
        if guarded.denied_by is not None:
            refused = _Refused(
                "denied",
                ErrorCode.LLM_GUARDRAIL_BLOCKED,
                f"the answer matches guardrail {guarded.denied_by.rule_id}",
            )
            return self._failed(
                request, ctx, provider, refused, outcomes, started, usage=read.usage
            )
        read = read_answer(api, guarded.value)
        outcomes += ungranted_tools(bundle.profiles.get(ctx.sender), read.tool_calls)
        latency = round((time.monotonic() - started) * 1000)
        self._completed(request, ctx, provider, "succeeded", read.usage, outcomes, latency)
        return LlmResponse(
            id=ctx.derive_id("llm_response"),
            created_at=utc_now(),
            request_id=request.request_id,
            session_id=request.session_id,
            model=request.model,
            provider=provider,
            status="succeeded",
            text=read.text,
            tool_calls=read.tool_calls,
            usage=read.usage,
            finish_reason=read.finish_reason,
            body=guarded.value,
            guardrails=tuple(outcomes),
            latency_ms=latency,
        )

    def _failed(
        self,
        request: LlmRequest,
        ctx: Context,
        provider: str,
        refused: _Refused,
        outcomes: list[GuardrailOutcome],
        started: float,
        retryable: bool = False,
        usage: LlmUsage | None = None,
    ) -> LlmResponse:
        # Rounded, not truncated: a stream cut at its deadline is cut when the loop's clock is
        # within its resolution of it, and 2,999.99 ms read as 2,999 is a cut before 3 s.
        latency = round((time.monotonic() - started) * 1000)
        spent = usage or LlmUsage()
        self._completed(request, ctx, provider, refused.status, spent, outcomes, latency, refused)
        return LlmResponse(
            id=ctx.derive_id("llm_response"),
            created_at=utc_now(),
            request_id=request.request_id,
            session_id=request.session_id,
            model=request.model,
            provider=provider,
            status=refused.status,
            usage=spent,
            error=LlmError(code=str(refused.code), message=refused.message, retryable=retryable),
            guardrails=tuple(outcomes),
            latency_ms=latency,
        )

    @staticmethod
    def _completed(
        request: LlmRequest,
        ctx: Context,
        provider: str,
        status: str,
        usage: LlmUsage,
        outcomes: list[GuardrailOutcome],
        latency_ms: int,
        refused: _Refused | None = None,
    ) -> None:
        """The request's audit line (seed 002 §18 `llm_request_completed`): metadata only."""
        log.info(
            "llm_request_completed",
            extra={
                "model": request.model,
                "provider": provider,
                "sender": ctx.sender,
                "status": status,
                "code": str(refused.code) if refused else "",
                "tokens_in": usage.prompt_tokens,
                "tokens_out": usage.completion_tokens,
                "latency_ms": latency_ms,
                "guardrails": [f"{o.stage}:{o.rule_id}:{o.action}:{o.count}" for o in outcomes],
            },
        )
