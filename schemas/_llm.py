"""Seed 002's model calls: `llm_request` (§12.2), a call to the LLM gateway, and its answer.

A brain never holds a provider key: it sends the gateway the conversation in the wire format
of one provider API (`api`: OpenAI's chat completions or Anthropic's Messages), and the
gateway forwards it to the provider that serves `model`, with its own key, after the gate and
its own guardrails let it. `options` carries the rest of that API's request body (a response
format, tools, a system prompt); the fields the gateway owns (the model, the token limit,
streaming, the messages) cannot be set there.

The answer carries what the provider reported: the text, the tool calls, the usage as counted
by the provider (never estimated by the caller), the finish reason, and the provider's JSON
body with the gateway's response guardrails applied, so a brain reads its own wire format as
if it had asked the provider itself.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from schemas._base import Envelope, Id, Name, NonNegative, UserId

__all__ = (
    "GuardrailOutcome",
    "LlmChunk",
    "LlmContext",
    "LlmError",
    "LlmRequest",
    "LlmResponse",
    "LlmToolCall",
    "LlmUsage",
    "SourceProvenance",
)

ModelName = Annotated[str, Meta(min_length=1, max_length=200)]


class SourceProvenance(Struct, frozen=True, kw_only=True):
    """Where part of a prompt came from (seed 002 §12.2 `sourceProvenance`), as the calling
    agent reports it: nobody checks it, and every field is bounded (it is shown to a person)."""

    source_type: Annotated[str, Meta(max_length=200)]
    path: Annotated[str, Meta(max_length=1024)] = ""
    trust_level: Annotated[str, Meta(max_length=64)] = "untrusted"


class LlmContext(Struct, frozen=True, kw_only=True):
    """Seed 002 §12.2 `contextMetadata`."""

    source_provenance: Annotated[tuple[SourceProvenance, ...], Meta(max_length=64)] = ()
    redaction_applied: bool = False


class LlmRequest(Envelope, frozen=True, kw_only=True, tag="llm_request"):
    """A brain asks a model (seed 002 §12.2): a call to the LLM gateway (`target`).

    `request_id` names the call (its answer names it too); `messages` are in the wire format
    of `api`. `max_output_tokens` is what the caller wants at most; the gateway passes the
    smaller of it and the bundle's `max_output_tokens` to the provider.
    """

    request_id: Id
    session_id: Id
    task_id: Id
    step_id: Id
    model: ModelName
    api: Literal["openai", "anthropic"] = "openai"
    messages: Annotated[tuple[dict[str, Any], ...], Meta(min_length=1, max_length=1000)]
    options: dict[str, Any] = {}
    context_metadata: LlmContext = LlmContext()
    stream: bool = False
    max_output_tokens: Annotated[int, Meta(ge=1)] | None = None
    target: Name = "llm"
    user_id: UserId = ""


class LlmUsage(Struct, frozen=True, kw_only=True):
    """Tokens as the provider reported them."""

    prompt_tokens: NonNegative = 0
    completion_tokens: NonNegative = 0
    total_tokens: NonNegative = 0


class LlmToolCall(Struct, frozen=True, kw_only=True):
    id: str
    name: str
    arguments: str = ""
    """The arguments as the model wrote them (JSON text)."""


class LlmError(Struct, frozen=True, kw_only=True):
    code: str
    message: str
    retryable: bool = False


class GuardrailOutcome(Struct, frozen=True, kw_only=True):
    """One guardrail decision: which rule, on which side, and what it did."""

    rule_id: str
    stage: Literal["request", "response"]
    action: Literal["redacted", "denied", "marked", "flagged"]
    count: NonNegative = 1


class LlmResponse(Envelope, frozen=True, kw_only=True, tag="llm_response"):
    """The gateway's answer to one `llm_request`: exactly one per request id."""

    request_id: Id
    session_id: Id
    model: str
    provider: str = ""
    status: Literal["succeeded", "failed", "denied"]
    text: str = ""
    tool_calls: tuple[LlmToolCall, ...] = ()
    usage: LlmUsage = LlmUsage()
    finish_reason: str = ""
    body: dict[str, Any] = {}
    """The provider's answer in its own wire format, with the response guardrails applied."""
    error: LlmError | None = None
    guardrails: tuple[GuardrailOutcome, ...] = ()
    latency_ms: NonNegative = 0


class LlmChunk(Struct, frozen=True, kw_only=True):
    """A piece of a streamed answer's text, as the provider writes it (seed 002 §12.2 `stream`).

    Not an envelope and never stored: the gateway publishes it on core NATS
    (`Namespace.chunks`, to the principal that asked alone), and a chunk lost on the way is
    lost. The `llm_response` that follows is the answer; chunks only show it early. `index`
    counts from 0; the last chunk of an answer has `done`.

    The same shape goes to the person whose session the call works in
    (`Namespace.typing`): there `text` is only what the agent says (its reply's `message`,
    actors/llm/_typing.py) and `agent` names who is writing it.
    """

    request_id: Id
    index: NonNegative
    text: str = ""
    done: bool = False
    agent: str = ""
