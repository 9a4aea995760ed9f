"""The transcript window: what a model is shown of a session's transcript (seed 001 §5).

Seed 001 passes each agent call the goal verbatim and "the last 8 transcript items (or ~2-3K
tokens), oldest-first", and when the prompt risks overflowing, "truncate the oldest transcript
entries first". The router cuts the window it sends in an `agent_call`, and the agent host
cuts it again to its own model's context; both must cut by the same rule, or what a turn is
shown depends on which of the two cut last. So the rule lives here, beside `TranscriptItem`,
as one pure function both import: the same transcript always gives the same window, which a
re-run after a crash relies on.

The rule: the last `max_items` items, oldest first; while their text exceeds `max_chars`, the
oldest goes; the newest item always stays (its start, cut to the budget and marked with an
ellipsis when it alone is too long), because it is what the turn answers: the previous
speaker's reply or the router's handoff task. A window of no items is a caller's explicit
choice (an agent profile that wants no transcript). The budget counts item text only, a
stand-in for tokens that needs no tokenizer.
"""

from __future__ import annotations

from typing import Final

from schemas._envelopes import TranscriptItem

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
        max_items: most items passed; 0 passes none.
        max_chars: most characters of item text passed (at least 1).

    Returns:
        The window, oldest first.

    Raises:
        ValueError: a negative item count or a budget of no characters.
    """
    if max_items < 0 or max_chars < 1:
        raise ValueError(
            "a window takes no negative item count and a budget of at least one character"
        )
    recent = list(transcript[-max_items:]) if max_items else []
    total = sum(len(item.text) for item in recent)
    while len(recent) > 1 and total > max_chars:
        total -= len(recent.pop(0).text)
    if recent and total > max_chars:
        newest = recent[0]
        cut = newest.text[: max(max_chars - len(_ELLIPSIS), 0)] + _ELLIPSIS
        recent[0] = TranscriptItem(role=newest.role, name=newest.name, text=cut[:max_chars])
    return tuple(recent)
