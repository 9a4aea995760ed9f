"""Seed 000's local agent bridge frames: NDJSON over a local agent process's stdin/stdout.

These never cross the bus; they are the contract between an agent host and the agent program
it runs as a child. The tag field is the seed's `type`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta, Struct

__all__ = (
    "AnyFrame",
    "HistoryTurn",
    "LocalPromptConstraints",
    "LocalPromptMetrics",
    "LocalPromptRequest",
    "LocalPromptResponse",
)


class HistoryTurn(Struct, frozen=True, kw_only=True):
    role: Literal["local_agent", "remote_agent", "user"]
    text: str


class LocalPromptConstraints(Struct, frozen=True, kw_only=True):
    """Seed 000 defaults; the timeout is 60 s without tool use and up to 120 s with it."""

    max_output_chars: Annotated[int, Meta(ge=1)] = 12000
    allow_tool_use: bool = False
    max_history_turns: Annotated[int, Meta(ge=0)] = 6
    max_history_chars: Annotated[int, Meta(ge=0)] = 24000
    max_tool_rounds: Annotated[int, Meta(ge=0)] = 3
    local_turn_timeout_ms: Annotated[int, Meta(ge=1)] = 60000


class LocalPromptRequest(
    Struct, frozen=True, kw_only=True, tag_field="type", tag="desktop.local_prompt.request"
):
    request_id: str
    profile_id: str
    session_id: str
    turn_index: Annotated[int, Meta(ge=0)]
    mode: Literal["manual", "semi_auto", "full_auto"] = "manual"
    objective: str
    remote_message: str = ""
    history: tuple[HistoryTurn, ...] = ()
    history_summary: str | None = None
    constraints: LocalPromptConstraints = LocalPromptConstraints()


class LocalPromptMetrics(Struct, frozen=True, kw_only=True):
    latency_ms: Annotated[int, Meta(ge=0)] = 0


class LocalPromptResponse(
    Struct, frozen=True, kw_only=True, tag_field="type", tag="desktop.local_prompt.response"
):
    request_id: str
    status: Literal["ok", "error"]
    draft_message: str = ""
    reason: str = ""
    metrics: LocalPromptMetrics = LocalPromptMetrics()


AnyFrame = LocalPromptRequest | LocalPromptResponse
