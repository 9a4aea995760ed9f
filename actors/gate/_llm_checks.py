"""The gate's checks of a model call (seed 002 §10 `llmPolicy`, §17): the model allowlist and
the prompt's size, before the LLM gateway sees it. Pure.

The rules themselves are the gateway's (actors/llm/_policy.py), applied here first so a
refused call costs no delivery, and again by the gateway on the bundle it verified itself.
The session's tokens are `decide()`'s: an `llm_response` charges its trace, and the
person's session the trace works in, with the usage the provider reported (`charge_tokens`);
a call is refused once either has spent `max_session_tokens` (`spent_session_tokens`).
"""

from __future__ import annotations

from msgspec import structs

from actors.gate._records import LiveCall, SessionTokens, session_tokens_key
from actors.gate._routes import Deny, Route, Submission
from actors.llm import check_llm_policy
from schemas import (
    AgentResponse,
    AnyEnvelope,
    DelegationResponse,
    ErrorCode,
    LlmRequest,
    LlmResponse,
    PolicyBundle,
    SubAgentResult,
)

__all__ = (
    "charge_tokens",
    "check_llm_request",
    "session_key",
    "spent_call_budget",
    "spent_session_tokens",
    "tokens_spent",
)


def check_llm_request(sub: Submission, envelope: LlmRequest, bundle: PolicyBundle) -> Deny | None:
    """Whether the sender may send this model call (`sub`'s envelope) to a provider."""
    refused = check_llm_policy(bundle, sub.sender, envelope)
    if refused is None:
        return None
    return Deny(
        refused.code, refused.rule, refused.message, limit=refused.limit, value=refused.value
    )


def charge_tokens(live: dict[str, LiveCall], route: Route, reported: int) -> int:
    """What an admitted answer adds to its trace's tokens, noting a model answer's usage on
    the call its model call was made for (edits `live`, the trace's calls awaiting an answer;
    an answer is charged before its call leaves it).

    A model answer is charged what the provider reported. An agent's own answer reports the
    tokens its brain spent, the model answers' among them: it is charged only what it
    reports beyond those already charged, so a call through the gateway is never charged
    twice, and an agent that under-reports is still charged what its model calls used.
    """
    if isinstance(route.sub.envelope, LlmResponse):
        parent = route.position.levels[-1].call_id
        call = live.get(parent)
        if call is not None:
            live[parent] = structs.replace(call, measured_tokens=call.measured_tokens + reported)
        return reported
    answered = route.answered.call_id if route.answered is not None else ""
    closing = live.get(answered)
    measured = closing.measured_tokens if closing is not None else 0
    return max(0, reported - measured)


def spent_call_budget(live: dict[str, LiveCall], route: Route) -> Deny | None:
    """A model call refused because the call its agent works on (a delegation with
    `max_tokens`, seed 003) has spent its tokens: what its model calls reported so far.

    Only the agent's own model calls count against its call's budget; the calls it makes to
    other agents are bounded by their own.
    """
    if not isinstance(route.sub.envelope, LlmRequest) or len(route.position.levels) < 2:
        return None
    working = route.position.levels[-2]  # the agent's own level; the last is the new call's
    budget = working.token_budget
    call = live.get(working.call_id)
    if budget is None or call is None or call.measured_tokens < budget:
        return None
    return Deny(
        ErrorCode.BUDGET_EXCEEDED,
        "max_tokens",
        f"call {working.call_id[:80]} has spent {call.measured_tokens} of its {budget} "
        "tokens (its model calls, as the provider reported them)",
        limit=budget,
        value=call.measured_tokens,
    )


def session_key(route: Route) -> str:
    """The session tokens record of the trace's session: the gate's own record of the
    root's session and origin; "" for a trace in none, or when no limit is set."""
    position = route.position
    if not route.counts_session_tokens or not position.session_id or not position.origin:
        return ""
    return session_tokens_key(position.origin, position.session_id)


def spent_session_tokens(
    route: Route, bundle: PolicyBundle, trace_tokens: int, session: SessionTokens | None
) -> Deny | None:
    """A call refused because its session has spent `max_session_tokens`: all the traces
    of a person's session together (each message is a trace of its own), or the trace
    alone when it works in no session."""
    limit = bundle.llm_policy.max_session_tokens
    if limit is None:
        return None
    session_k = session_key(route)
    spent = max(trace_tokens, session.tokens if session is not None else 0)
    if spent < limit:
        return None
    what = (
        f"session {route.position.session_id}" if session_k else f"trace {route.position.trace_id}"
    )
    return Deny(
        ErrorCode.LLM_BUDGET_EXCEEDED,
        "max_session_tokens",
        f"{what} has spent {spent} of its {limit} tokens",
        limit=limit,
        value=spent,
    )


def tokens_spent(envelope: AnyEnvelope) -> int:
    """The tokens an answer reports it spent (a model answer: what the provider reported)."""
    match envelope:
        case AgentResponse() | DelegationResponse():
            return envelope.token_usage.total
        case SubAgentResult():
            return envelope.tokens_used
        case LlmResponse():
            return envelope.usage.total_tokens  # as the provider reported it
        case _:
            return 0
