"""The person's error answers as a load generator reads them (tools/_refusals.py): each one
counted by code once, and handed to whoever waits on the envelope it answers."""

from __future__ import annotations

import asyncio

from schemas import Error, ErrorCode, encode, new_id, utc_now
from tools._refusals import Refusals
from tools.demo import demo_message


def _error(code: ErrorCode, cause: str | None) -> Error:
    return Error(id=new_id(), created_at=utc_now(), code=code, message="no", cause_id=cause)


async def test_a_refusal_wakes_its_waiter_and_is_counted_once() -> None:
    refusals = Refusals()
    waiting, other = refusals.expect("m1"), refusals.expect("m2")
    refused = _error(ErrorCode.RATE_LIMITED, "m1")
    assert refusals.take(encode(refused)) == refused
    assert refusals.take(encode(refused)) is None  # redelivered: the same answer
    assert await asyncio.wait_for(waiting, 1) == refused
    assert not other.done()
    assert refusals.counts == {"RATE_LIMITED": 1} and refusals.total() == 1


async def test_a_duplicate_id_refusal_is_counted_but_wakes_nobody() -> None:
    """It answers a repeat of an envelope already decided: the first decision stands."""
    refusals = Refusals()
    waiting = refusals.expect("m1")
    refusals.take(encode(_error(ErrorCode.DUPLICATE_ENVELOPE, "m1")))
    assert not waiting.done()
    assert refusals.counts == {"DUPLICATE_ENVELOPE": 1}
    refusals.forget("m1")
    assert waiting.cancelled()


async def test_other_deliveries_are_not_refusals_and_bad_bytes_are_counted() -> None:
    refusals = Refusals()
    assert refusals.take(b"not an envelope") is None
    assert refusals.take(encode(demo_message())) is None
    assert refusals.counts == {"undecodable": 1}
