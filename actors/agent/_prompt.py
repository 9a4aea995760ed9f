"""What a brain is asked: one call's inputs, and seed 001's system prompt and context.

`BrainCall` is the same for every backend and every kind of call (a collaboration turn, a
delegation, a sub-agent call), so a brain answers one shape of question. The prompt texts are
seed 001 §4-5 word for word where the seed gives words: the shared rules, the name hint, the
goal, the transcript window oldest first, "Round r of m" and the closing JSON instruction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from actors.agent._profile import AgentProfile
from actors.delegation import ToolRound
from schemas import (
    AgentCall,
    DelegationRequest,
    SubAgentCall,
    TranscriptItem,
    transcript_window,
)

__all__ = (
    "JSON_ONLY",
    "SHARED_RULES",
    "BrainCall",
    "call_for",
    "intermediate_text",
    "system_prompt",
    "user_prompt",
)

SHARED_RULES = (
    "1. You are collaborating with another assistant in a turn-based session managed by a "
    "router.\n"
    "2. Return only strict JSON matching the provided schema: {message, handoff?, final?}.\n"
    "3. If you want the other assistant to go next, include a concise handoff with `to` and a "
    "one-sentence `task`.\n"
    "4. If the solution is complete, set `final: true` and omit `handoff`.\n"
    "5. Be concise and move the task forward each turn."
)
"""Seed 001 §4's shared rules, identical for every agent."""

JSON_ONLY = "Return JSON only per schema\u2014no extra text."
"""Seed 001 §4's final instruction."""

_CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class BrainCall:
    """One question for a brain, whatever kind of envelope carried it."""

    kind: Literal["agent_call", "delegation_request", "sub_agent_call"]
    envelope_id: str
    call_id: str
    session_id: str | None
    goal: str
    task: str = ""
    transcript: tuple[TranscriptItem, ...] = ()
    round: int = 1
    max_rounds: int = 1
    final_round: bool = False
    attempt: int = 1
    rounds: tuple[ToolRound, ...] = ()
    """What the brain asked other agents so far while answering this call, and the results
    (actors/delegation/): a brain goes on from them."""
    delegates_to: tuple[str, ...] = ()
    """Agents the brain may delegate to (seed 003's tool offered when any)."""
    sub_agents: tuple[str, ...] = ()
    """Agents the brain may call as sub-agents (seed 004's tool offered when any)."""
    tools: tuple[str, ...] = ()
    """Tools the brain may have the tool runtime run, by capability (seed 002 §9)."""
    background: str = ""
    """What a sub-agent's caller chose to show of its session beyond the messages (seed 004's
    conversation summary and workspace view), as the callee's model is to read it."""

    @property
    def offers_requests(self) -> bool:
        """Whether the brain may answer this call with requests (agents or tools)."""
        return bool(self.delegates_to or self.sub_agents or self.tools)


def system_prompt(profile: AgentProfile) -> str:
    """Seed 001's shared rules, the name hint, the peers, then the profile's own prompt."""
    parts = [SHARED_RULES, f"Your name is `{profile.name}`."]
    if profile.peers:
        parts.append("You may hand off to: " + ", ".join(f"`{p}`" for p in profile.peers) + ".")
    if profile.system_prompt.strip():
        parts.append(profile.system_prompt.strip())
    return "\n\n".join(parts)


def _transcript_budget(profile: AgentProfile) -> int:
    """Characters of transcript text a prompt may carry: half the model's context.

    The other half is left to the system prompt, the goal, the task and the answer. The
    router already sent a window cut by the same rule (schemas/_transcript.py); this cuts it
    again to the budget of this agent's own model.
    """
    return profile.max_context_tokens * _CHARS_PER_TOKEN // 2


def user_prompt(call: BrainCall, profile: AgentProfile) -> str:
    """The context of one call (seed 001 §4): goal, transcript window, round, JSON instruction."""
    window = transcript_window(
        call.transcript,
        max_items=profile.transcript_window,
        max_chars=_transcript_budget(profile),
    )
    lines = [f"Goal: {call.goal}"]
    if call.background:
        lines.append("")
        lines.append("Background from the caller:")
        lines.append(call.background.strip())
    if window:
        lines.append("")
        lines.append("Recent transcript (oldest first):")
        lines.extend(f"[{item.name or item.role}] {item.text}" for item in window)
    if call.task and call.task != call.goal:
        lines.append("")
        lines.append(f"Your task: {call.task}")
    for index, done in enumerate(call.rounds, 1):
        lines.append("")
        lines.append(f"Results of the agents you called (step {index}):")
        for request, result in zip(done.requests, done.results, strict=True):
            lines.append(f"- {request.request_id} [{result.status}] {result.content}")
    lines.append("")
    round_line = f"Round {call.round} of {call.max_rounds}."
    if call.final_round:
        round_line += " This is the last round: finish now and set `final: true`."
    lines.append(round_line)
    lines.append(JSON_ONLY)
    return "\n".join(lines)


def intermediate_text(earlier: object) -> str:
    """Seed 003's `intermediate_results` as the next agent reads them: text as it is, a list
    of texts one per line, anything else as JSON (a text is not quoted and escaped again)."""
    if isinstance(earlier, str):
        return earlier
    if isinstance(earlier, list) and all(isinstance(item, str) for item in earlier):
        return "\n".join(earlier)
    return json.dumps(earlier)


def call_for(envelope: AgentCall | DelegationRequest | SubAgentCall, attempt: int) -> BrainCall:
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
            task = envelope.input
            earlier = envelope.handoff_data.intermediate_results
            if earlier is not None:  # seed 003's chain: the previous agent's result
                shown = intermediate_text(earlier)
                task = f"{task}\n\nIntermediate results: {shown}".strip()
            return BrainCall(
                kind="delegation_request",
                envelope_id=envelope.id,
                call_id=envelope.request_id,
                session_id=envelope.child_session_id or envelope.parent_session_id,
                goal=envelope.objective,
                task=task,
                transcript=facts,
                attempt=attempt,
            )
        case SubAgentCall():
            messages = tuple(
                TranscriptItem(role=m.role, name=m.role, text=m.content)
                for m in envelope.context.messages
            )
            task_input = "" if envelope.args.input is None else str(envelope.args.input)
            beyond = (envelope.context.summary, envelope.context.workspace)
            return BrainCall(
                background="\n\n".join(part.strip() for part in beyond if part),
                kind="sub_agent_call",
                envelope_id=envelope.id,
                call_id=envelope.call_id,
                session_id=envelope.session_id,
                goal=envelope.args.task,
                task=task_input,
                transcript=messages,
                attempt=attempt,
            )
