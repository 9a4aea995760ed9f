"""Raw inputs: bytes that are not envelopes reach `handle_raw()` untouched, and a message of
PARLEY_DEAD that keeps failing is given up on without being dead-lettered again (which would
loop). A real actor process on the real server."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

import pytest
from nats.aio.client import Client as NATS

from bus import DEAD_REASON, EmbeddedServer
from schemas import Namespace
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor

READER = "support.deadreader:DeadReader"
GARBAGE = b"\xff\x00{not an envelope"


@pytest.fixture
def reader(nats_server: EmbeddedServer, namespace: Namespace) -> Iterator[ProcessOutput]:
    env = parley_env(
        nats_server.url, namespace.root, max_deliver="2", backoff_s="[0.05]", ack_wait_s="2"
    )
    process = start_actor(READER, "reader", env)
    yield process
    process.close()


async def test_raw_bytes_and_malformed_headers_reach_the_handler(
    nc: NATS, namespace: Namespace, reader: ProcessOutput
) -> None:
    js = nc.jetstream()
    await reader.wait_line(READY)
    # Headers an envelope input would refuse as malformed: a raw input does not read them.
    headers = {DEAD_REASON: "decode_malformed", "Parley-Hop-Count": "-1"}
    ack = await js.publish(namespace.dead("gpt"), GARBAGE, headers=headers)
    _, line = await reader.wait_line(r'"msg":"raw message"')
    seen = json.loads(line)
    assert seen["seq"] == ack.seq and seen["subject"] == namespace.dead("gpt")
    assert seen["sha256"] == hashlib.sha256(GARBAGE).hexdigest()
    assert seen["reason"] == "decode_malformed"
    assert seen["id"] == f"{namespace.stream('dead')}:{ack.seq}"
    info = await js.stream_info(namespace.stream("dead"))
    assert info.state.messages == 1  # the bad headers did not make it a new dead letter


async def test_a_failing_dead_letter_is_given_up_not_dead_lettered_again(
    nc: NATS, namespace: Namespace, reader: ProcessOutput
) -> None:
    js = nc.jetstream()
    await reader.wait_line(READY)
    failing = await js.publish(namespace.dead("gpt"), b"please fail")
    _, line = await reader.wait_line(r'"msg":"gave up on a dead letter')
    given_up = json.loads(line)
    assert (given_up["seq"], given_up["attempt"]) == (failing.seq, 2)  # max_deliver = 2
    # The actor goes on, and what it gave up on is still where it was, once, and settled.
    fine = await js.publish(namespace.dead("gpt"), b"fine")
    _, line = await reader.wait_line(r'"msg":"raw message"')
    assert json.loads(line)["seq"] == fine.seq
    info = await js.stream_info(namespace.stream("dead"))
    assert info.state.messages == 2
    consumer = await js.consumer_info(namespace.stream("dead"), "reader")
    assert consumer.num_pending == 0
    assert consumer.ack_floor.stream_seq >= failing.seq  # terminated, not left pending
