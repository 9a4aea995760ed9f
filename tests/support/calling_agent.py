"""A local agent that calls other agents through the bridge's optional frame pair, for tests.

It reads `desktop.local_prompt.request` frames on stdin. Offered agents and given no results
yet, it answers with one `parley.agent_calls.request` that delegates to the first two agents
offered (`delegate_to_agent`), or, with `[sub]` in the objective, calls the first sub-agent
offered (`call_sub_agent`). Given results, it answers with a reply that gathers them. With
nothing offered it answers at once, saying which fields its request had, so a test can see
that the new fields are absent, not merely empty.

Markers in the objective choose a mistake instead: `[malformed]` asks with arguments that
miss the objective and name an agent not offered, `[unoffered]` asks even when nothing was
offered, `[unreadable]` sends an agent-calls frame whose `calls` is not a list.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from schemas import (
    AgentCallsRequest,
    AgentsOffered,
    AgentToolCall,
    LocalPromptRequest,
    LocalPromptResponse,
    decode_frame,
    encode,
)

__all__ = ("main",)

_SEED_000_FIELDS = frozenset(
    (
        "type",
        "request_id",
        "profile_id",
        "session_id",
        "turn_index",
        "mode",
        "objective",
        "remote_message",
        "history",
        "history_summary",
        "constraints",
    )
)


def _send(data: bytes) -> None:
    sys.stdout.buffer.write(data + b"\n")
    sys.stdout.buffer.flush()


def _log(text: str) -> None:
    sys.stderr.write(f"calling_agent[{os.getpid()}]: {text}\n")
    sys.stderr.flush()


def _answer(request: LocalPromptRequest, message: str) -> None:
    reply = json.dumps({"message": message, "final": True})
    _send(
        encode(LocalPromptResponse(request_id=request.request_id, status="ok", draft_message=reply))
    )


def _calls(request: LocalPromptRequest, delegates: tuple[str, ...], subs: tuple[str, ...]) -> None:
    objective = request.objective
    task = request.remote_message or objective
    calls: list[AgentToolCall] = []
    if "[malformed]" in objective:
        calls.append(AgentToolCall(id="c1", name="delegate_to_agent", arguments={"input": task}))
        calls.append(
            AgentToolCall(
                id="c2",
                name="delegate_to_agent",
                arguments={"target_employee": "nobody", "objective": "x"},
            )
        )
    elif "[sub]" in objective:
        arguments: dict[str, Any] = {"agent_name": subs[0], "task": f"check {task}"}
        calls.append(AgentToolCall(id="s1", name="call_sub_agent", arguments=arguments))
    else:
        for n, target in enumerate(delegates[:2], 1):
            arguments = {"target_employee": target, "objective": f"part {n} of {task}"}
            calls.append(AgentToolCall(id=f"c{n}", name="delegate_to_agent", arguments=arguments))
    _log(f"asking {len(calls)} agent(s) for {request.request_id}")
    frame = AgentCallsRequest(
        request_id=request.request_id, text="asking around", calls=tuple(calls)
    )
    _send(encode(frame))


def _gathered(request: LocalPromptRequest) -> str:
    rounds = request.tool_results or ()
    seen = [
        f"{call.id}->{call.arguments.get('target_employee') or call.arguments.get('agent_name')} "
        f"[{result.status}] {result.content}"
        for done in rounds
        for call, result in zip(done.calls, done.results, strict=True)
    ]
    return f"gathered after {len(rounds)} round(s): " + " | ".join(seen)


def _handle(line: bytes) -> None:
    request = decode_frame(line)
    assert isinstance(request, LocalPromptRequest)
    fields = sorted(json.loads(line))
    objective = request.objective
    if "[unreadable]" in objective:
        _send(
            json.dumps(
                {
                    "type": "parley.agent_calls.request",
                    "request_id": request.request_id,
                    "calls": "x",
                }
            ).encode()
        )
        return
    offered = request.agents
    if "[unoffered]" in objective and not isinstance(offered, AgentsOffered):
        _calls(request, ("anyone",), ())
        return
    if request.tool_results:
        _answer(request, _gathered(request))
        return
    if isinstance(offered, AgentsOffered):
        _calls(request, offered.delegates_to, offered.sub_agents)
        return
    extra = sorted(set(fields) - _SEED_000_FIELDS)
    _answer(request, json.dumps({"objective": objective, "extra_fields": extra}))


def main() -> None:
    _log("ready")
    for line in sys.stdin.buffer:
        if line.strip():
            _handle(line)


if __name__ == "__main__":
    main()
