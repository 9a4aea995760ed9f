"""The subprocess brain: a local agent program behind seed 000's NDJSON prompt channel.

The call becomes one `desktop.local_prompt.request` frame: the goal is the objective, the
latest message from someone else is `remote_message`, and the transcript is the history,
bounded by `max_history_turns` and `max_history_chars` with the dropped turns folded into a
deterministic `history_summary` (seed 000, history bounding). The agent's `draft_message` is
the reply text, checked against seed 001's contract like any brain's. The frame carries no
token counts, so usage is estimated from the text.

When the call offers other agents, the frame says who (`agents`), and the child may answer
with `parley.agent_calls.request` instead: its calls are checked by the same parser as a
hosted model's tool calls (actors/agent/brains/_tools.py) and become the answer's requests,
or, when any is malformed, the request fails as INVALID_REQUEST saying why (not retryable:
the child's answer, not the service, is at fault). The host asks again later with a new
request whose `tool_results` hold every round so far, re-sent the same way as a hosted
model's earlier tool calls: only the tool's own arguments, and each result's status and text.
"""

from __future__ import annotations

import json
from typing import Literal

from msgspec import UNSET

from actors.agent._profile import AgentProfile, SubprocessBrainConfig
from actors.agent._prompt import BrainCall
from actors.agent.brains._bridge import LocalAgentBridge
from actors.agent.brains._protocol import BrainAnswer, BrainError, estimate_tokens, usage_of
from actors.agent.brains._tools import ToolCall, parse_tool_calls, tool_arguments
from actors.delegation import ToolRound
from schemas import (
    HISTORY_SUMMARY,
    AgentCallsRequest,
    AgentsOffered,
    AgentToolCall,
    AgentToolResult,
    AgentToolRound,
    ErrorCode,
    HistoryTurn,
    LocalPromptConstraints,
    LocalPromptRequest,
    TranscriptItem,
    new_id,
)

__all__ = ("SubprocessBrain", "bounded_history")

_SUMMARY_ITEM_CHARS = 80
_SUMMARY_CHARS = 1000


_Role = Literal["local_agent", "remote_agent", "user"]


def _role(item: TranscriptItem, own_name: str) -> _Role:
    if item.role == "user":
        return "user"
    return "local_agent" if item.role == own_name or item.name == own_name else "remote_agent"


def _is_summary(item: TranscriptItem) -> bool:
    return item.role == "router" and item.name == HISTORY_SUMMARY


def bounded_history(
    transcript: tuple[TranscriptItem, ...], own_name: str, max_turns: int, max_chars: int
) -> tuple[tuple[HistoryTurn, ...], str | None]:
    """The most recent turns within both bounds, and a summary of the ones dropped.

    A summary the router already made of turns it dropped leads the summary as it is: taken
    for a turn, it was dropped in its turn and cut to a line, and the turns it told of lost.
    """
    earlier = [item.text for item in transcript if _is_summary(item)]
    turns = [
        HistoryTurn(role=_role(item, own_name), text=item.text)
        for item in transcript
        if not _is_summary(item)
    ]
    kept: list[HistoryTurn] = []
    used = 0
    for turn in reversed(turns):
        if len(kept) >= max_turns or used + len(turn.text) > max_chars:
            break
        kept.append(turn)
        used += len(turn.text)
    kept.reverse()
    dropped = turns[: len(turns) - len(kept)]
    if dropped:
        earlier.append(
            f"{len(dropped)} earlier turn(s): "
            + " | ".join(f"{turn.role}: {turn.text[:_SUMMARY_ITEM_CHARS]}" for turn in dropped)
        )
    if not earlier:
        return tuple(kept), None
    return tuple(kept), " | ".join(earlier)[:_SUMMARY_CHARS]


def _round_frame(done: ToolRound) -> AgentToolRound:
    """One earlier round as the child sees it: its calls as it could have made them."""
    calls = []
    for request in done.requests:
        name, arguments = tool_arguments(request)
        calls.append(AgentToolCall(id=request.request_id, name=name, arguments=arguments))
    results = tuple(
        AgentToolResult(id=request.request_id, status=result.status, content=result.content)
        for request, result in zip(done.requests, done.results, strict=True)
    )
    return AgentToolRound(text=done.text, calls=tuple(calls), results=results)


class SubprocessBrain:
    """Answers through a local agent child process."""

    backend = "subprocess"

    def __init__(self, profile: AgentProfile, config: SubprocessBrainConfig) -> None:
        self._profile = profile
        self._config = config
        self.bridge = LocalAgentBridge(config.command)

    async def start(self) -> None:
        await self.bridge.start()

    async def close(self) -> None:
        await self.bridge.close()

    def request_for(self, call: BrainCall) -> LocalPromptRequest:
        """The seed 000 request frame for one call."""
        config = self._config
        history, summary = bounded_history(
            call.transcript, self._profile.name, config.max_history_turns, config.max_history_chars
        )
        if call.background:  # seed 004's summary and workspace view: the frame's summary
            summary = f"{call.background.strip()}\n\n{summary}" if summary else call.background
        others = [
            item for item in call.transcript if _role(item, self._profile.name) != "local_agent"
        ]
        remote = call.task or (others[-1].text if others else "")
        offers_agents = bool(call.delegates_to or call.sub_agents)
        return LocalPromptRequest(
            request_id=f"req_{new_id()}",
            profile_id=self._profile.name,
            session_id=call.session_id or call.call_id,
            turn_index=call.round,
            mode="full_auto",
            objective=call.goal,
            remote_message=remote,
            history=history,
            history_summary=summary,
            constraints=LocalPromptConstraints(
                max_output_chars=config.max_output_chars,
                allow_tool_use=config.allow_tool_use,
                max_history_turns=config.max_history_turns,
                max_history_chars=config.max_history_chars,
                local_turn_timeout_ms=int(config.timeout_s * 1000),
            ),
            agents=(
                AgentsOffered(delegates_to=call.delegates_to, sub_agents=call.sub_agents)
                if offers_agents
                else UNSET
            ),
            tool_results=tuple(map(_round_frame, call.rounds)) if call.rounds else UNSET,
        )

    async def reply(self, call: BrainCall) -> BrainAnswer:
        frame = self.request_for(call)
        response = await self.bridge.request(frame, self._config.timeout_s)
        prompt = _prompt_tokens(frame)
        if isinstance(response, AgentCallsRequest):
            return _agent_calls_answer(response, call, prompt)
        if response.status == "error":
            raise BrainError(
                ErrorCode.INTERNAL_ERROR,
                f"the local agent refused the request: {response.reason or 'no reason given'}",
                retryable=False,
            )
        text = response.draft_message[: self._config.max_output_chars]
        return BrainAnswer(text=text, usage=usage_of(prompt, estimate_tokens(text)))


def _prompt_tokens(frame: LocalPromptRequest) -> int:
    """An estimate of what the child was given to read: the call, and earlier results."""
    results = () if frame.tool_results is UNSET else frame.tool_results
    return estimate_tokens(
        frame.objective,
        frame.remote_message,
        *(t.text for t in frame.history),
        *(result.content for done in results for result in done.results),
    )


def _agent_calls_answer(frame: AgentCallsRequest, call: BrainCall, prompt: int) -> BrainAnswer:
    """The child's calls as the answer's requests, checked like a hosted model's tool calls.

    Raises:
        BrainError: INVALID_REQUEST when any call is malformed; none of them is sent then.
    """
    tool_calls = [ToolCall(c.id, c.name, c.arguments) for c in frame.calls]
    parsed = parse_tool_calls(tool_calls, call)
    if parsed.malformed:
        raise BrainError(
            ErrorCode.INVALID_REQUEST,
            f"the local agent made malformed agent calls: {parsed.summary()[:300]}",
            retryable=False,
        )
    asked = estimate_tokens(
        frame.text, *(f"{c.name}{json.dumps(c.arguments)}" for c in frame.calls)
    )
    return BrainAnswer(text=frame.text, usage=usage_of(prompt, asked), requests=parsed.requests)
