"""The orchestrator's knobs: the router's `[options] orchestration` table.

A pydantic model like every actor's options: an unknown or invalid option fails the router's
start with the option named.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ("OrchestrationOptions",)


class OrchestrationOptions(BaseModel):
    """Seed 000's per-turn constraints and `semi_auto`'s risk rules (docs/orchestration.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    turn_timeout_s: float = Field(default=60.0, gt=0)
    """Seed 000's local prompt timeout (60 s without tool use), for each agent's answer: a
    call unanswered this long, or whose agent stops beating, ends the session in `error`."""
    max_history_turns: int = Field(default=6, ge=0)
    max_history_chars: int = Field(default=24000, ge=0)
    summary_chars: int = Field(default=1000, ge=0)
    """The `history_summary` of dropped turns is cut to this many characters."""
    max_output_chars: int = Field(default=12000, ge=1)
    """A draft longer than this is cut before it is sent or shown for approval."""
    review_over_chars: int | None = Field(default=2000, ge=1)
    """`semi_auto`: a draft longer than this waits for the owner (None: no size rule)."""
    review_secrets: bool = True
    """`semi_auto`: a draft in which the redactor finds a credential waits for the owner."""
    review_pii: bool = True
    """`semi_auto`: a draft in which the redactor finds personal data waits for the owner."""
    review_tool_use: bool = True
    """`semi_auto`: a draft the local agent wrote after calling tools (other agents, through
    its brain's tool loop) waits for the owner: what the tools brought back is in it, and
    the owner never saw it."""
