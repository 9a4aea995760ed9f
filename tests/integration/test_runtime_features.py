"""The runtime's promises besides delivery: heartbeats, metrics, task dumps, long handlers,
the watchdog, and counted permission violations. Real processes, real servers."""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client as NATS
from prometheus_client import CollectorRegistry

from bus import ActorMetrics, EmbeddedServer, connect, load_settings
from schemas import ActorHeartbeat, Namespace, encode, heartbeat_key
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor
from tests.support.wire import PROBE, Effects, deliver, human


@pytest.fixture
def probe_env(nats_server: EmbeddedServer, namespace: Namespace) -> dict[str, str]:
    return parley_env(
        nats_server.url,
        namespace.root,
        ack_wait_s="0.6",
        fetch_timeout_s="0.5",
        watchdog_idle_fetches="2",
        metrics_port="0",
    )


@pytest.fixture
def probe(probe_env: dict[str, str]) -> Iterator[ProcessOutput]:
    process = start_actor(PROBE, "probe", probe_env)
    yield process
    process.close()


async def test_heartbeat_is_in_the_registry(
    nc: NATS, namespace: Namespace, probe: ProcessOutput
) -> None:
    await probe.wait_line(READY)
    kv = await nc.jetstream().key_value(namespace.bucket("registry"))
    entry = await kv.get(heartbeat_key("probe"))
    assert entry.value is not None
    beat = msgspec.json.decode(entry.value, type=ActorHeartbeat)
    assert (beat.actor_id, beat.kind, beat.pid) == ("probe", "probe", probe.pid)
    assert beat.inputs == (namespace.deliver("probe"),)


async def test_metrics_are_served_per_actor(
    nc: NATS, namespace: Namespace, probe: ProcessOutput, effects: Effects
) -> None:
    _, served = await probe.wait_line(r'"msg":"metrics served"')
    match = re.search(r'"port":(\d+)', served)
    assert match is not None
    await probe.wait_line(READY)
    message = human("counted")
    await deliver(nc.jetstream(), namespace, "probe", encode(message), message.id)
    await effects.next()
    await effects.next()  # `done` is submitted after the effect: the message is handled
    url = f"http://127.0.0.1:{match.group(1)}/metrics"

    def scrape() -> str:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())

    text = await asyncio.to_thread(scrape)
    stream = namespace.stream("deliver")
    # Counted when fetched, so certainly by the time its effects were read.
    assert f'parley_messages_received_total{{actor="probe",stream="{stream}"}} 1.0' in text


async def test_sigusr1_dumps_every_task(probe: ProcessOutput) -> None:
    await probe.wait_line(READY)
    probe.signal(signal.SIGUSR1)
    index, _ = await probe.wait_line(r"^--- \d+ asyncio tasks ---$")
    await probe.wait_line(r"_fetch_until_stopped", start=index)
    assert probe.process.poll() is None, "a task dump must not stop the actor"


async def test_handler_longer_than_ack_wait_is_not_redelivered(
    nc: NATS, namespace: Namespace, probe: ProcessOutput, effects: Effects
) -> None:
    await probe.wait_line(READY)
    slow = human("slow:2.0")  # more than three times ack_wait (0.6 s)
    await deliver(nc.jetstream(), namespace, "probe", encode(slow), slow.id)
    _, effect = await effects.next()
    _, done = await effects.next()
    assert (effect.attempt, done.attempt) == (1, 1), "in_progress() kept the message ours"
    assert await effects.none_left()
    info = await nc.jetstream().consumer_info(namespace.stream("deliver"), "probe")
    assert info.num_redelivered == 0


async def test_watchdog_recreates_a_deleted_consumer(
    nc: NATS, namespace: Namespace, probe: ProcessOutput, effects: Effects
) -> None:
    await probe.wait_line(READY)
    js = nc.jetstream()
    await js.delete_consumer(namespace.stream("deliver"), "probe")
    await probe.wait_line(r"consumer vanished; re-creating it")
    message = human("after the rebind")
    await deliver(js, namespace, "probe", encode(message), message.id)
    _, effect = await effects.next()
    assert effect.call_id == message.id


async def test_permission_violations_are_counted(tmp_path: Path) -> None:
    config = (
        "authorization { users = [ { user: agent, password: secret, "
        'permissions: { publish: { deny: ["parley.deliver.>"] } } } ] }\n'
    )
    seen = asyncio.Event()
    loop = asyncio.get_running_loop()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage() == "permission violation":
                loop.call_soon_threadsafe(seen.set)

    watch = Watch()
    logging.getLogger("parley.bus.connection").addHandler(watch)
    try:
        with EmbeddedServer(tmp_path / "auth", extra_config=config) as server:
            settings = load_settings(nats_url=server.url, user="agent", password="secret")
            metrics = ActorMetrics(CollectorRegistry(), "agent")
            client = await connect(settings, "agent", metrics)
            await client.publish("parley.deliver.victim", b"forged")
            await client.flush()
            await asyncio.wait_for(seen.wait(), 10)
            value = metrics.registry.get_sample_value(
                "parley_permission_violations_total", {"actor": "agent"}
            )
            assert value == 1.0
            await client.close()
    finally:
        logging.getLogger("parley.bus.connection").removeHandler(watch)


async def test_a_stuck_handler_loses_its_message_to_another_replica(
    nc: NATS, namespace: Namespace, probe_env: dict[str, str], effects: Effects
) -> None:
    """Two replicas share one durable consumer. The first gets stuck for ever after its effect;
    past max_handler_s it stops vouching for the message, which goes to the other replica."""
    env = {**probe_env, "PARLEY_MAX_HANDLER_S": "1"}
    first = start_actor(PROBE, "probe", env)
    second: ProcessOutput | None = None
    try:
        await first.wait_line(READY)
        stuck = human("hang-after-effect")
        await deliver(nc.jetstream(), namespace, "probe", encode(stuck), stuck.id)
        _, effect = await effects.next()
        assert effect.attempt == 1
        second = start_actor(PROBE, "probe", env)
        await second.wait_line(READY)
        _, done = await effects.next()
        assert done.attempt == 2
        assert done.text == f"hang-after-effect@{second.pid}"
        assert first.process.poll() is None, "the stuck replica is still alive, just bypassed"
    finally:
        first.close()
        if second is not None:
            second.close()


async def test_a_deferred_reminder_comes_back_past_max_deliver_and_is_never_dead_lettered(
    nc: NATS, namespace: Namespace, probe_env: dict[str, str], effects: Effects
) -> None:
    """`ctx.defer` naks without failing: a reminder deferred seven times (max_deliver is 3)
    is delivered an eighth time, and nothing reaches the dead letters."""
    env = {**probe_env, "PARLEY_MAX_DELIVER": "3"}
    process = start_actor("support.probe:ReminderProbe", "probe", env)
    try:
        await process.wait_line(READY)
        js = nc.jetstream()
        reminder = human("remind:8")
        await js.publish(
            namespace.timers("probe"), encode(reminder), headers={"Nats-Msg-Id": reminder.id}
        )
        _, effect = await effects.next(timeout=20)
        assert (effect.text, effect.attempt) == ("remind:8", 8)
        assert (await js.stream_info(namespace.stream("dead"))).state.messages == 0
        # The probe acks the reminder once its effect is stored: the effect can reach the
        # test before the ack reaches the consumer.
        async with asyncio.timeout(10):
            while (
                info := await js.consumer_info(namespace.stream("timers"), "probe")
            ).num_ack_pending:
                await nc.flush()
        assert info.config.max_deliver == -1
        assert (info.num_ack_pending, info.num_pending) == (0, 0)
    finally:
        process.close()
