"""What an agent sees of the session on its turn: the transcript window (seed 001 §5).

The router passes each agent the goal verbatim, the last few transcript items oldest-first and
the round; the agent host writes them into its model's prompt with the JSON-only instruction.
The window is bounded twice, by a number of items and by a character budget (a stand-in for
the seed's 2-3K tokens that needs no tokenizer), and when it overflows the oldest items go
first, as the seed asks. A pure function: the same transcript always gives the same window,
which a re-run after a crash relies on.
"""

from __future__ import annotations

from typing import Final

from schemas import TranscriptItem

__all__ = ("DEFAULT_WINDOW_CHARS", "DEFAULT_WINDOW_ITEMS", "transcript_window")

DEFAULT_WINDOW_ITEMS: Final = 8
"""Seed 001 §5: "the last 8 transcript items"."""

DEFAULT_WINDOW_CHARS: Final = 10_000
"""About 2.5K tokens at four characters a token: the seed's "~2-3K tokens"."""

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
