"""The gate's refusal budget, on a clock the test moves: when a sender's refusals stop being
recorded, for how long, and whose always are (actors/gate/_refusal_budget.py)."""

from __future__ import annotations

from actors.gate._refusal_budget import RefusalBudget


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_refusal_that_spends_the_budget_says_so_and_the_rest_of_the_minute_is_quiet() -> None:
    clock = _Clock()
    budget = RefusalBudget(3, clock=clock)
    assert [budget.spend("hog") for _ in range(2)] == ["", ""]
    assert not budget.quiet("hog")  # two of three: still on the record
    clock.now += 20
    notice = budget.spend("hog")
    assert "refused 3 times within a minute" in notice and "next 40 s" in notice, notice
    assert budget.quiet("hog")
    assert budget.spend("hog") == ""  # one of the batch decided already: told once
    assert not budget.quiet("bob")  # per sender
    clock.now += 39.9
    assert budget.quiet("hog")
    clock.now += 0.1  # the minute since its first refusal has ended: on the record again
    assert not budget.quiet("hog")
    assert budget.spend("hog") == ""  # a new window, counted from this refusal
    assert not budget.quiet("hog")


def test_senders_that_submit_for_others_are_always_on_the_record() -> None:
    budget = RefusalBudget(1, exempt=("router",), clock=_Clock())
    assert budget.spend("router") == "" and not budget.quiet("router")
    assert budget.spend("gpt") != "" and budget.quiet("gpt")


def test_ended_windows_are_forgotten_once_many_senders_were_seen() -> None:
    clock = _Clock()
    budget = RefusalBudget(1, clock=clock)
    for n in range(10_000):
        budget.spend(f"s{n}")
    clock.now += 61
    budget.spend("late")
    assert len(budget._windows) == 1
