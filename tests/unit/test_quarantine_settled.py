"""The quarantine counts possible deaths, not deliveries (bus/_quarantine.py `Settled`)."""

from __future__ import annotations

from bus._quarantine import GUARDED_FROM, Settled


def test_a_delivery_is_guarded_once_enough_earlier_ones_may_have_died() -> None:
    settled = Settled()
    assert not settled.guarded("S", 7, GUARDED_FROM - 1)
    assert settled.guarded("S", 7, GUARDED_FROM)


def test_deliveries_nacked_here_are_no_deaths() -> None:
    settled = Settled()
    settled.add("S", 7)
    settled.add("S", 7)
    assert not settled.guarded("S", 7, GUARDED_FROM)  # two clean failures, then this one
    assert settled.guarded("S", 7, GUARDED_FROM + 2)  # two more, not seen to settle
    assert settled.guarded("S", 8, GUARDED_FROM), "counted per message"
    assert settled.guarded("T", 7, GUARDED_FROM), "and per stream"


def test_the_record_is_bounded_and_forgets_the_oldest_first() -> None:
    settled = Settled(limit=2)
    for seq in (1, 1, 2, 3):
        settled.add("S", seq)
    assert settled.guarded("S", 1, GUARDED_FROM), "forgotten: counted as possible deaths again"
    assert not settled.guarded("S", 3, GUARDED_FROM), "one settle of three: one death"


def test_a_handed_over_count_is_absolute_so_the_larger_is_kept() -> None:
    settled = Settled()
    settled.add("S", 7)
    settled.absorb("S", 7, 3)  # an earlier process settled three deliveries
    assert not settled.guarded("S", 7, GUARDED_FROM + 2)  # of its 4 earlier, 3 settled
    settled.absorb("S", 7, 1)  # an older record says less: still three
    assert settled.unexplained("S", 7, 5) == 1
    settled.absorb("S", 8, 0)
    assert settled.knows("S", 8) and not settled.knows("S", 9)


def test_the_most_recent_entries_are_handed_over() -> None:
    settled = Settled()
    for seq in (1, 2, 3, 2):
        settled.add("S", seq)
    assert settled.recent(2) == [("S", 3, 1), ("S", 2, 2)]


def test_an_acked_message_is_forgotten() -> None:
    settled = Settled()
    settled.add("S", 7)
    settled.forget("S", 7)
    assert not settled.knows("S", 7) and settled.recent(10) == []
