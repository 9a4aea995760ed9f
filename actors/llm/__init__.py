"""The LLM gateway: every model call an agent makes, through the gate, answered with keys only
the gateway holds (seed 002 §3.3, §4.2, §8.2, §12.2, §17; docs/llm-gateway.md).

Public face: `LlmActor` (`parley run llm`), the policy the gate applies first
(`check_llm_policy`, `estimate_input_tokens`, `output_cap`), the guardrails (`guard`), and
the providers' shared wire helpers (`RETRYABLE_STATUS`, `provider_message`).

Inside: `_actor` (the process), `_options` (providers, keys, models), `_policy`,
`_body_fields` (what a caller's options may set), `_guardrails`, `_provider` (httpx,
retries, typed failures), `_wire` (the two APIs' bodies and answers), `_answers` (each
request answered at most once).
"""

from typing import TYPE_CHECKING

from actors.llm._guardrails import UNTRUSTED_OPEN, Guarded, guard, ungranted_tools
from actors.llm._options import LlmOptions, ProviderSettings
from actors.llm._policy import (
    CHARS_PER_TOKEN,
    LlmRefusal,
    check_llm_policy,
    estimate_input_tokens,
    model_allowed,
    output_cap,
)
from actors.llm._wire import RETRYABLE_STATUS, provider_message, provider_tool_name
from bus import lazy_exports

if TYPE_CHECKING:
    from actors.llm._actor import LlmActor

# The provider client (httpx) only for the gateway's own process: the gate reads the policy.
__getattr__ = lazy_exports(__name__, {"LlmActor": "actors.llm._actor"})

__all__ = (
    "CHARS_PER_TOKEN",
    "RETRYABLE_STATUS",
    "UNTRUSTED_OPEN",
    "Guarded",
    "LlmActor",
    "LlmOptions",
    "LlmRefusal",
    "ProviderSettings",
    "check_llm_policy",
    "estimate_input_tokens",
    "guard",
    "model_allowed",
    "output_cap",
    "provider_message",
    "provider_tool_name",
    "ungranted_tools",
)
