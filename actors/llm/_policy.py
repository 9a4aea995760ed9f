"""The bundle's LLM policy for one request: which models, how many tokens. Pure.

The gate applies it before delivery (actors/gate/_llm_checks.py), so a refused call never
reaches the gateway, and the gateway applies it again on the bundle it verified itself, so
a gateway reached some other way still keeps it:

- the model must be in the bundle's `llm_policy.allowed_models` (empty: none) and, when the
  sender's profile names `allowed_models`, in that list too;
- `options` may set only the body fields that shape one answer (actors/llm/_body_fields.py);
- the prompt's estimated size must be within `max_input_tokens` (`estimate_input_tokens`);
- what the provider is asked to write at most is the smaller of the request's own
  `max_output_tokens` and the bundle's (`output_cap`); the usage it reports is checked
  against that cap when the answer comes.

`max_session_tokens` is the gate's: every `llm_response` charges its trace with the usage the
provider reported (actors/gate/_decide.py), and a call in a trace that spent its tokens is
refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import msgspec

from actors.llm._body_fields import refused_fields
from schemas import ErrorCode, LlmRequest, PolicyBundle

__all__ = (
    "CHARS_PER_TOKEN",
    "LlmRefusal",
    "check_llm_policy",
    "estimate_input_tokens",
    "model_allowed",
    "output_cap",
)

CHARS_PER_TOKEN = 4
"""The estimate's ratio: about four characters of English (or JSON) a token, as providers'
own rules of thumb say. Counted over the JSON of the messages and the options (tools and
schemas are input too), so the estimate leans high rather than low."""


@dataclass(frozen=True, slots=True)
class LlmRefusal:
    """Why a request may not go to the provider: the code, the rule and the numbers."""

    code: ErrorCode
    rule: str
    message: str
    limit: int | None = None
    value: int | None = None


def estimate_input_tokens(request: LlmRequest) -> int:
    """The prompt's size in tokens, estimated before any provider sees it."""
    size = len(msgspec.json.encode(request.messages))
    if request.options:
        size += len(msgspec.json.encode(request.options))
    return math.ceil(size / CHARS_PER_TOKEN)


def model_allowed(bundle: PolicyBundle, sender: str, model: str) -> bool:
    """Whether `sender` may call `model`: the deployment's list and its profile's both name it."""
    if model not in bundle.llm_policy.allowed_models:
        return False
    profile = bundle.profiles.get(sender)
    own = profile.allowed_models if profile is not None else ()
    return own is None or model in own


def output_cap(bundle: PolicyBundle, request: LlmRequest) -> int | None:
    """The most the provider is asked to write: the request's wish within the bundle's limit."""
    limits = [n for n in (request.max_output_tokens, bundle.llm_policy.max_output_tokens) if n]
    return min(limits) if limits else None


def check_llm_policy(bundle: PolicyBundle, sender: str, request: LlmRequest) -> LlmRefusal | None:
    """Whether `sender` may send `request` to a provider under `bundle`."""
    if not model_allowed(bundle, sender, request.model):
        profile = bundle.profiles.get(sender)
        own = profile.allowed_models if profile is not None else None
        allowed = [m for m in bundle.llm_policy.allowed_models if own is None or m in own]
        return LlmRefusal(
            ErrorCode.CAPABILITY_DENIED,
            "allowed_models",
            f"{sender} may not call model {request.model!r} (allowed: {allowed or 'none'})",
        )
    refused = refused_fields(request.api, request.options)
    if refused is not None:
        return LlmRefusal(ErrorCode.INVALID_REQUEST, "options", refused)
    limit = bundle.llm_policy.max_input_tokens
    if limit is not None:
        estimate = estimate_input_tokens(request)
        if estimate > limit:
            return LlmRefusal(
                ErrorCode.LLM_BUDGET_EXCEEDED,
                "max_input_tokens",
                f"the prompt is about {estimate} tokens (JSON characters / {CHARS_PER_TOKEN}), "
                f"over max_input_tokens {limit}",
                limit=limit,
                value=estimate,
            )
    return None
