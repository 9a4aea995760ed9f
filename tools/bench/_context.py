"""The `context` row of `parley bench`: seed 004's context bloat, planner -> coder -> reviewer
against one agent doing the same task.

Tokens sent are counted the way the hosts build them: each brain call's system prompt and
user prompt (actors.agent's own prompt builders, over the call a host would hand its brain:
`call_for()`), at four characters a token. Both runs start from the same conversation (40
messages, a few about the parser) and do the same three steps: write the fix, review it,
report.

- one agent: three calls in one conversation, each seeing the conversation and the steps
  before it (its profile's transcript window, as a host cuts it);
- planner -> coder -> reviewer: the planner's first call (the conversation; it asks the
  coder), the coder as a sub-agent seeing only what its `ContextFilter` keeps (keywords
  "parser", last 4), the reviewer as a sub-agent seeing the last 2 of those and the coder's
  result as input, and the planner's second call (the conversation and both results).

The ratio is the second's tokens over the first's; seed 004 asks for under 1.2.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from actors.agent import AgentProfile, call_for, system_prompt, user_prompt
from actors.delegation import CallSubAgent, RequestResult, ToolRound, build_filtered_context
from schemas import (
    AgentCall,
    ContextFilter,
    ContextMessage,
    DelegationRequest,
    HandoffData,
    SubAgentArgs,
    SubAgentCall,
    TranscriptItem,
    new_id,
    utc_now,
)

__all__ = ("context_row",)

_TASK = "Fix the date bug in the CSV parser and report what changed."
_STEPS = (
    "Wrote the fix: a pivot year of 70 for two-digit years, six new tests for the edge dates.",
    "Reviewed it: the pivot is right for our data; one test name is misleading, renamed.",
)


def _tokens(*texts: str) -> int:
    return sum(-(-len(text) // 4) for text in texts)


def _conversation() -> list[ContextMessage]:
    """Forty messages of a working session, four of them about the parser."""
    now = utc_now()
    topics = ("the release plan", "the budget", "the hiring round", "the office move")
    out: list[ContextMessage] = []
    for i in range(40):
        role = "user" if i % 2 == 0 else "assistant"
        about = "the CSV parser's date handling" if i % 10 == 3 else topics[i % 4]
        text = (
            f"Message {i} about {about}: " + "we went over the details, the open questions "
            "and who does what next, and agreed to come back to it on Friday. " * 3
        )
        out.append(
            ContextMessage(role=role, content=text, created_at=now - timedelta(minutes=40 - i))
        )
    return out


def _profile(name: str) -> AgentProfile:
    return AgentProfile.model_validate(
        {"name": name, "brain": {"backend": "scripted", "script": "unused.toml"}}
    )


def _sent(profile: AgentProfile, envelope: Any, rounds: tuple[ToolRound, ...] = ()) -> int:
    call = dataclasses.replace(call_for(envelope, 1), rounds=rounds)
    return _tokens(system_prompt(profile), user_prompt(call, profile))


def _round(agent: str, task: str, result: str) -> ToolRound:
    request = CallSubAgent(request_id=agent, args=SubAgentArgs(agent_name=agent, task=task))
    done = RequestResult(request_id=agent, status="success", content=result)
    return ToolRound(requests=(request,), results=(done,))


def _single(conversation: list[ContextMessage]) -> int:
    agent = _profile("solo")
    history = [TranscriptItem(role=m.role, name=m.role, text=m.content) for m in conversation]
    total = 0
    for step in range(3):
        call = AgentCall(
            id=new_id(), created_at=utc_now(), target="solo", call_id=new_id(), goal=_TASK,
            transcript=tuple(history), text=_TASK,
        )  # fmt: skip
        total += _sent(agent, call)
        if step < len(_STEPS):
            history.append(TranscriptItem(role="assistant", name="solo", text=_STEPS[step]))
    return total


def _planned(conversation: list[ContextMessage]) -> dict[str, int]:
    planner, coder, reviewer = _profile("planner"), _profile("coder"), _profile("reviewer")
    request = DelegationRequest(
        id=new_id(), created_at=utc_now(), request_id=new_id(), origin_employee="cli",
        target_employee="planner", user_id="", parent_session_id=new_id(), objective=_TASK,
        input="", handoff_data=HandoffData(facts=tuple(m.content for m in conversation)),
    )  # fmt: skip
    first = _sent(planner, request)
    keep = ContextFilter(keywords=("parser",), last_messages=4)
    filtered = build_filtered_context(conversation, keep, 4000, now=utc_now())
    to_coder = SubAgentCall(
        id=new_id(), created_at=utc_now(), call_id=new_id(), caller="planner", session_id="s",
        args=SubAgentArgs(agent_name="coder", task="Write the fix for the date bug.",
                          context=keep), context=filtered,
    )  # fmt: skip
    coding = _sent(coder, to_coder)
    narrower = ContextFilter(keywords=("parser",), last_messages=2)
    for_review = build_filtered_context(conversation, narrower, 4000, now=utc_now())
    to_reviewer = SubAgentCall(
        id=new_id(), created_at=utc_now(), call_id=new_id(), caller="planner", session_id="s",
        args=SubAgentArgs(agent_name="reviewer", task="Review this fix.", input=_STEPS[0],
                          context=narrower), context=for_review,
    )  # fmt: skip
    reviewing = _sent(reviewer, to_reviewer)
    rounds = (
        _round("coder", "Write the fix for the date bug.", _STEPS[0]),
        _round("reviewer", "Review this fix.", _STEPS[1]),
    )
    second = _sent(planner, request, rounds)
    return {"planner": first + second, "coder": coding, "reviewer": reviewing}


def context_row() -> dict[str, Any]:
    """Tokens sent by each run and their ratio."""
    conversation = _conversation()
    single = _single(conversation)
    parts = _planned(conversation)
    multi = sum(parts.values())
    return {"single_agent": single, "multi_agent": multi, "parts": parts, "ratio": multi / single}
