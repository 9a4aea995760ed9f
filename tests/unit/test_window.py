"""The transcript window of seed 001 §5."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.router._window import transcript_window
from schemas import TranscriptItem


def _item(n: int, text: str = "") -> TranscriptItem:
    return TranscriptItem(role="gpt", name="gpt", text=text or f"message {n}")


def test_keeps_the_last_eight_oldest_first() -> None:
    transcript = tuple(_item(n) for n in range(12))
    window = transcript_window(transcript)
    assert [item.text for item in window] == [f"message {n}" for n in range(4, 12)]


def test_drops_the_oldest_first_to_fit_the_budget() -> None:
    transcript = (_item(0, "a" * 50), _item(1, "b" * 50), _item(2, "c" * 50))
    window = transcript_window(transcript, max_chars=120)
    assert [item.text[0] for item in window] == ["b", "c"]


def test_a_newest_item_longer_than_the_budget_is_cut_not_dropped() -> None:
    window = transcript_window((_item(0, "x" * 500),), max_chars=100)
    assert len(window) == 1 and len(window[0].text) == 100 and window[0].text.endswith("…")


def test_refuses_an_empty_budget() -> None:
    with pytest.raises(ValueError, match="at least one"):
        transcript_window((), max_items=0)


@given(
    texts=st.lists(st.text(max_size=300), max_size=30),
    max_items=st.integers(1, 12),
    max_chars=st.integers(1, 2000),
)
def test_window_is_a_bounded_suffix(texts: list[str], max_items: int, max_chars: int) -> None:
    transcript = tuple(TranscriptItem(role="user", name="u", text=t) for t in texts)
    window = transcript_window(transcript, max_items=max_items, max_chars=max_chars)
    assert len(window) <= max_items
    assert sum(len(item.text) for item in window) <= max_chars
    if transcript:
        assert window, "the newest item is always passed"
        # Everything but a cut newest-kept item is an exact suffix of the transcript.
        assert window[1:] == transcript[len(transcript) - len(window) + 1 :]
