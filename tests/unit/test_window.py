"""The transcript window of seed 001 §5, the one rule the router and the agent host share."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas import DEFAULT_WINDOW_CHARS, DEFAULT_WINDOW_ITEMS, TranscriptItem, transcript_window


def _item(n: int, text: str = "") -> TranscriptItem:
    return TranscriptItem(role="gpt", name="gpt", text=text or f"message {n}")


def _texts(window: tuple[TranscriptItem, ...]) -> list[str]:
    return [item.text for item in window]


def test_the_defaults_are_the_seeds() -> None:
    assert (DEFAULT_WINDOW_ITEMS, DEFAULT_WINDOW_CHARS) == (8, 10_000)


def test_keeps_the_last_eight_oldest_first() -> None:
    transcript = tuple(_item(n) for n in range(12))
    window = transcript_window(transcript)
    assert [item.text for item in window] == [f"message {n}" for n in range(4, 12)]


def test_an_empty_transcript_gives_an_empty_window() -> None:
    assert transcript_window(()) == ()
    assert transcript_window((), max_items=1, max_chars=1) == ()


def test_exactly_the_item_limit_is_kept_whole_and_one_more_drops_the_oldest() -> None:
    at_limit = tuple(_item(n) for n in range(3))
    assert transcript_window(at_limit, max_items=3) == at_limit
    one_over = tuple(_item(n) for n in range(4))
    assert transcript_window(one_over, max_items=3) == one_over[1:]


def test_exactly_the_budget_is_kept_whole_and_one_more_drops_the_oldest() -> None:
    at_budget = (_item(0, "a" * 40), _item(1, "b" * 60))
    assert transcript_window(at_budget, max_chars=100) == at_budget
    one_over = (_item(0, "a" * 41), _item(1, "b" * 60))
    assert _texts(transcript_window(one_over, max_chars=100)) == ["b" * 60]


def test_drops_the_oldest_first_to_fit_the_budget() -> None:
    transcript = (_item(0, "a" * 50), _item(1, "b" * 50), _item(2, "c" * 50))
    window = transcript_window(transcript, max_chars=120)
    assert [item.text[0] for item in window] == ["b", "c"]


def test_the_budget_counts_item_text_only() -> None:
    named = tuple(
        TranscriptItem(role="a-long-role", name="a-long-name", text="x" * 10) for _ in range(5)
    )
    assert len(transcript_window(named, max_chars=30)) == 3


def test_a_newest_item_longer_than_the_budget_is_cut_not_dropped() -> None:
    window = transcript_window((_item(0, "x" * 500),), max_chars=100)
    assert len(window) == 1 and len(window[0].text) == 100 and window[0].text.endswith("…")


def test_the_newest_item_one_over_the_budget_is_cut_and_the_older_ones_dropped() -> None:
    newest = TranscriptItem(role="router", name="claude", text="t" * 11)
    (kept,) = transcript_window((_item(0, "old"), newest), max_chars=10)
    assert (kept.role, kept.name, kept.text) == ("router", "claude", "t" * 9 + "…")


def test_the_newest_item_kept_with_a_one_character_budget() -> None:
    assert _texts(transcript_window((_item(0), _item(1)), max_chars=1)) == ["…"]


def test_no_items_asked_for_gives_an_empty_window() -> None:
    assert transcript_window(tuple(_item(n) for n in range(5)), max_items=0) == ()


@pytest.mark.parametrize(("max_items", "max_chars"), [(-1, 100), (8, 0), (8, -5)])
def test_refuses_a_negative_item_count_or_an_empty_budget(max_items: int, max_chars: int) -> None:
    with pytest.raises(ValueError, match="at least one"):
        transcript_window((), max_items=max_items, max_chars=max_chars)


@given(
    texts=st.lists(st.text(max_size=300), max_size=30),
    max_items=st.integers(0, 12),
    max_chars=st.integers(1, 2000),
)
def test_window_is_a_bounded_suffix(texts: list[str], max_items: int, max_chars: int) -> None:
    transcript = tuple(TranscriptItem(role="user", name="u", text=t) for t in texts)
    window = transcript_window(transcript, max_items=max_items, max_chars=max_chars)
    assert len(window) <= max_items
    assert sum(len(item.text) for item in window) <= max_chars
    if transcript and max_items:
        assert window, "the newest item is always passed"
        # Everything but a cut newest-kept item is an exact suffix of the transcript.
        assert window[1:] == transcript[len(transcript) - len(window) + 1 :]
        assert window[-1].text == transcript[-1].text or len(window) == 1
