"""A model that never stops calling tools: the OpenAI wire server answering by what is offered.

Seed 000's `max_tool_rounds` is the host's bound, not the model's good manners, so the model
here calls `delegate_to_agent` every time a request offers tools, and only answers in text
(the reply contract's JSON) once a request offers none. Each request is checked against
OpenAI's tool-calling rules (tests/support/llm_server.py), so the host's re-sent rounds are
what the provider would accept. `hang` makes every request go unanswered instead: a brain
slower than its call's timeout.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tests.support.llm_server import Canned, WireServer, openai_completion, openai_tool_calls

__all__ = ("ToolLoopServer",)


class _ByRequest(deque[Canned]):
    """The answer queue, made up on demand from the request just recorded."""

    def __init__(self, server: ToolLoopServer) -> None:
        super().__init__()
        self._server = server

    def __bool__(self) -> bool:
        return True

    def popleft(self) -> Canned:
        return self._server.answer_for(self._server.requests[-1].body)


@dataclass
class ToolLoopServer(WireServer):
    """Calls `target` as a tool while tools are offered, then drafts `draft`."""

    target: str = "helper"
    draft: str = "A draft."
    hang: bool = False
    tool_calls: list[str] = field(default_factory=list)
    """The ids of the tool calls made, in order."""

    def __post_init__(self) -> None:
        self.answers = _ByRequest(self)

    def offered(self) -> list[bool]:
        """For each request so far, whether it offered tools."""
        return [bool(request.body and request.body.get("tools")) for request in self.requests]

    def answer_for(self, body: Any) -> Canned:
        if self.hang:
            return Canned(hang=True)
        if body and body.get("tools"):
            call_id = f"call_{len(self.tool_calls) + 1}"
            self.tool_calls.append(call_id)
            arguments = json.dumps({"target_employee": self.target, "objective": "Look it up"})
            return openai_tool_calls((call_id, "delegate_to_agent", arguments))
        return openai_completion(json.dumps({"message": self.draft}))
