"""How long an envelope waits for a cause the gate is still recording: one step behind the
backoff a failed submission (the cause) is retried on, so each look follows another try of
the cause; decided two deliveries short of `max_deliver`, keeping a retry of its own."""

from __future__ import annotations

from actors.gate._unfinished_causes import UnfinishedCauses


def test_the_wait_follows_the_causes_retries_and_keeps_a_retry_in_hand() -> None:
    causes = UnfinishedCauses((0.25, 1.0, 5.0), max_deliver=6)
    assert [causes.wait_s(attempt) for attempt in range(1, 7)] == [1.0, 5.0, 5.0, 5.0, None, None]


def test_with_too_few_deliveries_to_spare_it_is_decided_at_once() -> None:
    assert UnfinishedCauses((1.0,), max_deliver=2).wait_s(1) is None
    assert UnfinishedCauses((1.0,), max_deliver=3).wait_s(1) == 1.0
