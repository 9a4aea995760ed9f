"""What an agent sees on its turn: the transcript window and the context text (seed 001 §4-5).

The router passes each agent the goal verbatim, the last few transcript items oldest-first,
the round ("Round 3 of 6") and the JSON-only instruction. The window is bounded twice, by a
number of items and by a character budget (a stand-in for the seed's 2-3K tokens that needs no
tokenizer), and when it overflows the oldest items go first, as the seed asks. Pure functions:
the same transcript always gives the same window, which a re-run after a crash relies on.
"""

from __future__ import annotations

from typing import Final

from schemas import TranscriptItem

__all__ = (
    "DEFAULT_WINDOW_CHARS",
    "DEFAULT_WINDOW_ITEMS",
    "JSON_ONLY",
    "render_context",
    "transcript_window",
)

DEFAULT_WINDOW_ITEMS: Final = 8
"""Seed 001 §5: "the last 8 transcript items"."""

DEFAULT_WINDOW_CHARS: Final = 10_000
"""About 2.5K tokens at four characters a token: the seed's "~2-3K tokens"."""

JSON_ONLY: Final = "Return JSON only per schema—no extra text."
"""Seed 001 §4's final instruction, verbatim."""

_ELLIPSIS: Final = "…"


def transcript_window(
    transcript: tuple[TranscriptItem, ...],
    *,
    max_items: int = DEFAULT_WINDOW_ITEMS,
    max_chars: int = DEFAULT_WINDOW_CHARS,
) -> tuple[TranscriptItem, ...]:
    """The last `max_items` items, oldest first, dropping the oldest until they fit `max_chars`.

    The newest item is always kept (cut to the budget, its start kept) so an agent never gets
    an empty window just because the previous turn was long.

    Args:
        transcript: the whole transcript, oldest first.
        max_items: most items passed (at least 1).
        max_chars: most characters of item text passed (at least 1).

    Returns:
        The window, oldest first.
    """
    if max_items < 1 or max_chars < 1:
        raise ValueError("a window holds at least one item and one character")
    recent = list(transcript[-max_items:])
    total = sum(len(item.text) for item in recent)
    while len(recent) > 1 and total > max_chars:
        total -= len(recent.pop(0).text)
    if recent and total > max_chars:
        newest = recent[0]
        cut = newest.text[: max(max_chars - len(_ELLIPSIS), 0)] + _ELLIPSIS
        recent[0] = TranscriptItem(role=newest.role, name=newest.name, text=cut[:max_chars])
    return tuple(recent)


def _line(item: TranscriptItem) -> str:
    if item.role == "router":
        return f"[router → {item.name}] {item.text}"
    return f"[{item.name}] {item.text}"


def render_context(
    *,
    speaker: str,
    goal: str,
    window: tuple[TranscriptItem, ...],
    round_: int,
    max_rounds: int,
    final_round: bool,
    single: bool = False,
) -> str:
    """The context text of one agent call, in the order seed 001 §4 lists it.

    Args:
        speaker: the agent called (its name hint is its own system prompt's job).
        goal: the user's goal, verbatim.
        window: the transcript window, oldest first.
        round_: this turn's round, from 1.
        max_rounds: the session's cap.
        final_round: this is the last round the cap allows: the agent is asked to finish.
        single: a single call (`@gpt …`), which is answered once and has no rounds.

    Returns:
        The text put in `AgentCall.text`.
    """
    if single:
        return f"Goal: {goal}\n\n{JSON_ONLY}"
    parts = [f"Goal: {goal}", ""]
    if window:
        parts.append("Recent transcript (oldest first):")
        parts.extend(_line(item) for item in window)
        parts.append("")
    parts.append(f"Round {round_} of {max_rounds}. You are {speaker}.")
    if final_round:
        parts.append("This is the final round: finish the task in this reply and set final: true.")
    parts.append(JSON_ONLY)
    return "\n".join(parts)
