"""How long an envelope waits for a cause the gate is still recording: the retries' backoff
(as the cause's own retries go), then an ack wait; decided at its last delivery, never held
past it (the server would not deliver it again)."""

from __future__ import annotations

from unittest.mock import sentinel

from actors.gate._unfinished_causes import UnfinishedCauses


def test_the_wait_follows_the_backoff_then_the_ack_wait_and_ends_at_the_last_delivery() -> None:
    causes = UnfinishedCauses(
        sentinel.js, "idempotency", "SUBMIT", (0.25, 1.0, 5.0), ack_wait_s=30.0, max_deliver=6
    )
    assert [causes.wait_s(attempt) for attempt in range(1, 7)] == [0.25, 1.0, 5.0, 30.0, 30.0, None]


def test_a_single_delivery_is_decided_at_once() -> None:
    causes = UnfinishedCauses(sentinel.js, "idempotency", "SUBMIT", (1.0,), 30.0, max_deliver=1)
    assert causes.wait_s(1) is None
