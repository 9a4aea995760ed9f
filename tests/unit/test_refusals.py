"""Which timeouts `asked_at_start` takes as a refusal: only one after a permission violation
told while its own look-up ran (the real server's side is tests/integration/
test_start_refusals.py; here the look-up's outcomes are scripted to pin the rule down)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from bus import ConfigError, ConnectionRefusals, asked_at_start

_VIOLATION = 'nats: permissions violation for publish to "$JS.API.STREAM.INFO.KV_x"'


def _look_up(
    outcomes: list[BaseException | None], during: Callable[[], None] = lambda: None
) -> Callable[[], Awaitable[str]]:
    """A look-up failing with each of `outcomes` in turn (None: it answers), calling `during`
    on its first attempt."""
    attempts: list[int] = []

    async def call() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            during()
        outcome = outcomes[len(attempts) - 1]
        if outcome is not None:
            raise outcome
        return "answered"

    return call


async def test_a_timeout_after_a_refusal_during_the_look_up_is_said_as_one() -> None:
    refusals = ConnectionRefusals()
    call = _look_up([NatsTimeoutError(), None], during=lambda: refusals.note(_VIOLATION))
    with pytest.raises(ConfigError) as refused:
        await asked_at_start(refusals, call, "the policy bucket")
    assert str(refused.value).startswith("the policy bucket: the server refused this actor's")
    assert _VIOLATION in str(refused.value) and "parley nats-config" in str(refused.value)


async def test_a_refusal_told_before_the_look_up_says_nothing_of_it() -> None:
    """Something else was refused earlier: the look-up's timeout is an election's, asked
    again, and answered."""
    refusals = ConnectionRefusals()
    refusals.note(_VIOLATION)
    call = _look_up([NatsTimeoutError(), None])
    assert await asked_at_start(refusals, call, "the policy bucket") == "answered"


async def test_a_503_is_an_answer_not_a_refusal() -> None:
    """No responders is the server answering: asked again as during an election, even with
    a refusal told meanwhile."""
    refusals = ConnectionRefusals()
    call = _look_up([NoRespondersError(), None], during=lambda: refusals.note(_VIOLATION))
    assert await asked_at_start(refusals, call, "the policy bucket") == "answered"
