"""Which errors are an election's, and how long `through_elections` asks again (against a
real nats-server: a request nobody answers is refused `503 no responders`)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import (
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoStreamResponseError,
    ServiceUnavailableError,
)

from bus import is_election_error, through_elections
from schemas import Namespace


@pytest.mark.parametrize(
    "error",
    [
        NatsTimeoutError(),
        TimeoutError(),
        NoRespondersError(),
        NoStreamResponseError(),
        ServiceUnavailableError(code=503, description="JetStream system temporarily unavailable"),
        ServiceUnavailableError(),  # how nats-py's fetch raises a pull's 503 status
    ],
)
def test_timeouts_and_503s_are_an_elections(error: Exception) -> None:
    assert is_election_error(error)


@pytest.mark.parametrize(
    "error",
    [
        KeyNotFoundError(),
        KeyWrongLastSequenceError(),
        ValueError("bad"),
        OSError(),
        # 503s that no election ends: a full stream, no JetStream, no room to place it.
        ServiceUnavailableError(code=503, err_code=10077, description="maximum bytes exceeded"),
        ServiceUnavailableError(code=503, err_code=10039, description="not enabled for account"),
        ServiceUnavailableError(code=503, err_code=10023, description="insufficient resources"),
    ],
)
def test_answers_and_other_failures_are_not(error: Exception) -> None:
    assert not is_election_error(error)


class _Heard(logging.Handler):
    """Counts the helper's "asking again" lines, and sets `heard` on the first."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0
        self.heard = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("the cluster did not answer (electing"):
            self.count += 1
            self.heard.set()


@pytest.fixture
def heard() -> Iterator[_Heard]:
    handler = _Heard()
    logger = logging.getLogger("parley.bus.elections")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def _subject() -> str:
    return f"nobody.{uuid.uuid4().hex}"


async def test_asked_again_until_it_is_answered(nc: NATS, heard: _Heard) -> None:
    """Nobody answers (503 no responders) until a responder subscribes, after the first
    refusal."""
    subject = _subject()

    async def answer(msg: Msg) -> None:
        await msg.respond(b"answered")

    async def respond_once_refused() -> None:
        await heard.heard.wait()
        await nc.subscribe(subject, cb=answer)
        await nc.flush()

    responder = asyncio.create_task(respond_once_refused())
    reply = await through_elections(lambda: nc.request(subject, b"", timeout=2), "a request")
    await responder
    assert reply.data == b"answered"
    assert heard.count >= 1


async def test_the_election_error_is_final_past_the_bound(nc: NATS, heard: _Heard) -> None:
    subject = _subject()
    with pytest.raises(NoRespondersError):
        await through_elections(lambda: nc.request(subject, b"", timeout=2), "a", bound_s=0.5)
    assert heard.count == 1  # 0.25 s, then 0.25 + 0.5 > 0.5: given up


async def test_any_other_error_goes_through_at_once(
    nc: NATS, namespace: Namespace, heard: _Heard
) -> None:
    kv = await nc.jetstream().create_key_value(bucket=f"{namespace.root}_elections")
    await kv.create("key", b"first")
    with pytest.raises(KeyWrongLastSequenceError):
        await through_elections(lambda: kv.create("key", b"second"), "a create")
    assert heard.count == 0


async def test_a_stop_ends_the_waiting(nc: NATS, heard: _Heard) -> None:
    stop = asyncio.Event()
    stop.set()
    with pytest.raises(NoRespondersError):
        await through_elections(
            lambda: nc.request(_subject(), b"", timeout=2), "a request", stop=stop
        )
    assert heard.count == 0
