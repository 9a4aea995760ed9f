"""After a failed fetch a consumer pauses briefly at first, longer while failures go on."""

from __future__ import annotations

from bus._consumer import refetch_pause_s


def test_the_first_refusal_pauses_a_quarter_second_not_the_longest_backoff() -> None:
    assert refetch_pause_s(1, 5.0) == 0.25


def test_the_pause_doubles_while_fetches_keep_failing_up_to_the_longest_step() -> None:
    assert [refetch_pause_s(n, 5.0) for n in range(1, 7)] == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0]
    assert refetch_pause_s(60, 5.0) == 5.0
