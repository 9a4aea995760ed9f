"""Actor processes exchanging envelopes through a real JetStream, killed with real signals.

The test publishes on the receiver's deliver subject as the gate does (only the gate may write
there), and reads the receiver's effects from its submit subject, where the gate would pick
them up.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from nats.aio.client import Client as NATS

from bus import DEAD_ATTEMPT, DEAD_REASON, DEAD_SEQ, MSG_ID, EmbeddedServer
from schemas import Namespace, decode_envelope, encode
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor
from tests.support.wire import PROBE, Effects, dead_letters, deliver, human


@pytest.fixture
def env(nats_server: EmbeddedServer, namespace: Namespace) -> dict[str, str]:
    return parley_env(
        nats_server.url,
        namespace.root,
        ack_wait_s="0.6",
        backoff_s="[0.05]",
        max_deliver="3",
        fetch_timeout_s="1",
    )


@pytest.fixture
def processes() -> Iterator[list[ProcessOutput]]:
    started: list[ProcessOutput] = []
    yield started
    for process in started:
        process.close()


async def start_probe(env: dict[str, str], processes: list[ProcessOutput]) -> ProcessOutput:
    process = start_actor(PROBE, "probe", env)
    processes.append(process)
    await process.wait_line(READY)
    return process


@pytest.mark.chaos
async def test_sigkill_between_effect_and_ack_applies_the_effect_once_20_times(
    nc: NATS,
    namespace: Namespace,
    env: dict[str, str],
    effects: Effects,
    processes: list[ProcessOutput],
) -> None:
    js = nc.jetstream()
    # An ack wait long enough that a slow machine heartbeats well within it: the redelivery
    # must come from the restart, not from a lapse inside the first process.
    env = {**env, "PARLEY_ACK_WAIT_S": "1.5"}
    receiver = await start_probe(env, processes)
    for round_no in range(20):
        message = human("hang-after-effect")
        await deliver(js, namespace, "probe", encode(message), message.id)
        headers, effect = await effects.next()
        assert (effect.call_id, effect.reply.message, effect.attempt) == (
            message.id,
            "hang-after-effect",
            1,
        )
        assert headers[MSG_ID] == effect.id
        assert headers["Parley-Causation-Id"] == message.id
        assert receiver.kill() == -signal.SIGKILL, f"round {round_no}"
        receiver = await start_probe(env, processes)
        _, done = await effects.next()
        # The redelivered call ran again (attempt 2), re-published the effect with the same
        # id, and JetStream dropped that copy: the next envelope is `done`, not a second effect.
        assert done.id != effect.id and done.call_id == message.id
        assert done.attempt == 2, f"round {round_no}: {done}"
        assert done.text == f"hang-after-effect@{receiver.pid}", "handled by the restarted process"
    assert await effects.none_left()


async def test_poison_is_dead_lettered_and_good_traffic_flows(
    nc: NATS,
    namespace: Namespace,
    env: dict[str, str],
    effects: Effects,
    processes: list[ProcessOutput],
) -> None:
    js = nc.jetstream()
    await start_probe(env, processes)
    poison_seq = await deliver(
        js, namespace, "probe", b'{"kind":"human_message","text":', "poison-1"
    )
    good = human("good")
    await deliver(js, namespace, "probe", encode(good), good.id)
    _, effect = await effects.next()
    assert effect.call_id == good.id and effect.attempt == 1
    letter = await dead_letters(js, namespace, "probe", timeout=10)
    assert letter.headers is not None
    assert letter.headers[DEAD_REASON] == "decode_malformed"
    assert letter.headers[DEAD_SEQ] == str(poison_seq)
    assert letter.data == b'{"kind":"human_message","text":'


async def test_jetstream_headers_on_bad_input_do_not_block_its_dead_letter(
    nc: NATS,
    namespace: Namespace,
    env: dict[str, str],
    effects: Effects,
    processes: list[ProcessOutput],
) -> None:
    """`Nats-*` headers are instructions to JetStream; copied onto the dead letter they would
    make JetStream refuse it, and the message would never leave the work queue."""
    js = nc.jetstream()
    await start_probe(env, processes)
    poison = b"not json"
    ack = await js.publish(
        namespace.deliver("probe"),
        poison,
        headers={MSG_ID: "poison-2", "Nats-Expected-Stream": namespace.stream("deliver")},
    )
    letter = await dead_letters(js, namespace, "probe", timeout=10)
    assert letter.headers is not None
    assert letter.headers[DEAD_SEQ] == str(ack.seq)
    assert "Nats-Expected-Stream" not in letter.headers
    assert letter.data == poison


async def test_failing_handler_is_retried_then_dead_lettered(
    nc: NATS,
    namespace: Namespace,
    env: dict[str, str],
    effects: Effects,
    processes: list[ProcessOutput],
) -> None:
    js = nc.jetstream()
    await start_probe(env, processes)
    failing = human("fail")
    await deliver(js, namespace, "probe", encode(failing), failing.id)
    good = human("after")
    await deliver(js, namespace, "probe", encode(good), good.id)
    letter = await dead_letters(js, namespace, "probe", timeout=15)
    assert letter.headers is not None
    assert letter.headers[DEAD_REASON] == "handler_failed"
    assert letter.headers[DEAD_ATTEMPT] == "3"
    assert decode_envelope(letter.data) == failing
    _, effect = await effects.next()
    assert effect.call_id == good.id


@pytest.mark.chaos
async def test_message_that_crashes_every_delivery_is_moved_by_the_advisory(
    nc: NATS, namespace: Namespace, env: dict[str, str], processes: list[ProcessOutput]
) -> None:
    js = nc.jetstream()
    # Two deliveries, both unguarded: later ones would be handled under the quarantine's mark
    # (bus/_quarantine.py) and quarantined before the server gives up on the message.
    env = {**env, "PARLEY_MAX_DELIVER": "2"}
    receiver = await start_probe(env, processes)
    crasher = human("crash")
    seq = await deliver(js, namespace, "probe", encode(crasher), crasher.id)
    for _attempt in range(2):  # max_deliver=2: each delivery kills the process
        assert await receiver.wait_exit() == 70
        # A restarted probe may be handed the message (and die) before it logs "ready".
        receiver = start_actor(PROBE, "probe", env)
        processes.append(receiver)
    letter = await dead_letters(js, namespace, "probe", timeout=15)
    assert letter.headers is not None
    assert letter.headers[DEAD_REASON] == "max_deliveries"
    assert letter.headers[DEAD_SEQ] == str(seq)
    # The letter is stored before the original is deleted (never the other way round, so
    # nothing is lost); the actor logs once the delete is done.
    await receiver.wait_line(r'"msg":"moved an exhausted message out of its stream"')
    info = await js.stream_info(namespace.stream("deliver"))
    assert info.state.messages == 0, "the exhausted message must leave the work queue"


@pytest.mark.chaos
async def test_a_redelivery_of_a_message_still_in_hand_is_not_quarantined(
    nc: NATS,
    namespace: Namespace,
    env: dict[str, str],
    effects: Effects,
    processes: list[ProcessOutput],
) -> None:
    """A process too starved to send its in-progress heartbeat gets its own guarded message
    back while still handling it: no death, so no quarantine; the attempt in hand settles it.
    (Seen under load with a short ack wait: the auditor dead-lettered innocent facts.)"""
    env = {**env, "PARLEY_MAX_DELIVER": "10"}
    probe = start_actor("support.probe:StallingProbe", "probe", env)
    processes.append(probe)
    await probe.wait_line(READY)
    stalled = human("stall:1.5:1.5")  # blocked 1.5 s, 2.5 ack waits: it comes back meanwhile
    await deliver(nc.jetstream(), namespace, "probe", encode(stalled), stalled.id)
    for _death in range(2):  # deliveries 1 and 2 kill the process: the third is guarded
        assert await probe.wait_exit() == 70
        probe = start_actor("support.probe:StallingProbe", "probe", env)
        processes.append(probe)
    await probe.wait_line(r"still handling: left to that attempt", timeout=20)
    _, effect = await effects.next()
    _, done = await effects.next()
    assert (effect.call_id, done.attempt) == (stalled.id, 3)
    assert not any("quarantined a message" in line for line in probe.lines), probe.lines[-10:]


@pytest.mark.chaos
async def test_clean_failures_before_a_kill_do_not_get_the_message_quarantined(
    nc: NATS,
    namespace: Namespace,
    env: dict[str, str],
    effects: Effects,
    processes: list[ProcessOutput],
) -> None:
    """Two deliveries fail cleanly (in a cluster election a KV read times out), and the process
    is SIGKILLed by its operator during the third: one possible death, not three, so the
    fourth delivery is handled. (Seen in cluster chaos: the guard counted the clean failures
    as deaths, put the third delivery under its mark, and quarantined an innocent message.)"""
    env = {**env, "PARLEY_MAX_DELIVER": "10", "PARLEY_ACK_WAIT_S": "1.5"}
    receiver = await start_probe(env, processes)
    message = human("fail-fail-hang")
    await deliver(nc.jetstream(), namespace, "probe", encode(message), message.id)
    _, effect = await effects.next()
    assert (effect.call_id, effect.attempt) == (message.id, 3)
    assert receiver.kill() == -signal.SIGKILL
    receiver = await start_probe(env, processes)
    _, done = await effects.next()
    assert (done.call_id, done.attempt) == (message.id, 4)
    assert done.text == f"fail-fail-hang@{receiver.pid}"
    assert not any("quarantined" in line for line in receiver.lines), receiver.lines[-10:]
