"""Seed 000's history bounding: the turns a local prompt carries, and a summary of the rest.

Before each local prompt the history is cut to the most recent `max_history_turns` turns
whose texts fit together in `max_history_chars`; the older turns are dropped into a compact
`history_summary`. The summary is a pure function of the dropped turns (no model, no clock),
so the same history always gives the same prompt, and a router's restart re-builds it
byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from actors.orchestrator._state import Turn

__all__ = ("SUMMARY_ITEM_CHARS", "bound_history")

SUMMARY_ITEM_CHARS: Final = 80
"""Each dropped turn is summarised by its role and the start of its text."""


def bound_history(
    turns: Sequence[Turn], *, max_turns: int, max_chars: int, summary_chars: int
) -> tuple[tuple[Turn, ...], str | None]:
    """The most recent turns within both bounds, and the summary of the dropped ones.

    A turn is kept only whole, so a single turn longer than `max_chars` is summarised, never
    cut: the history holds only what was said, as it was said.

    Returns:
        (kept turns, oldest first; the summary, at most `summary_chars`, or None when nothing
        was dropped).
    """
    kept: list[Turn] = []
    used = 0
    for turn in reversed(turns):
        if len(kept) >= max_turns or used + len(turn.text) > max_chars:
            break
        kept.append(turn)
        used += len(turn.text)
    kept.reverse()
    dropped = turns[: len(turns) - len(kept)]
    if not dropped:
        return tuple(kept), None
    summary = f"{len(dropped)} earlier turn(s): " + " | ".join(
        f"{turn.turn_index}. {turn.role}: {' '.join(turn.text.split())[:SUMMARY_ITEM_CHARS]}"
        for turn in dropped
    )
    return tuple(kept), summary[:summary_chars]
