"""The gate's policy watch and the auditor ride through a cluster without quorum.

A real 3-node cluster with two nodes SIGKILLed has no quorum: JetStream requests time out or
are answered `503`, as they are while leaders are elected. Each test makes the path that used
to end the process meet that, then restarts the nodes and checks the actor carries on and
still works: the watch applies every bundle published meanwhile and after, the auditor
appends. Waits are on log lines, events and messages, never on sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig

from actors.auditor import ChainReport
from bus import MSG_ID, BundleStore, EmbeddedCluster, load_public_keys, provision, through_elections
from schemas import HumanMessage, Namespace, encode, key_id, new_id, utc_now
from tests.support.audit import AuditorKeys, decision
from tests.support.gate import Decisions, Signer, make_bundle, publish_bundle, start_gate, submit
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor
from tools.audit import verify_stream
from tools.chaos._reads import Stored, read_stream

pytestmark = pytest.mark.chaos

ASKING_AGAIN = "the cluster did not answer"


@asynccontextmanager
async def _client(cluster: EmbeddedCluster) -> AsyncIterator[NATS]:
    nc = await nats.connect(cluster.url.split(","), max_reconnect_attempts=-1)
    try:
        yield nc
    finally:
        await nc.close()


def _node_of(cluster: EmbeddedCluster, nc: NATS) -> str:
    """The node `nc` is connected to (kept running, so the client need not reconnect)."""
    assert nc.connected_url is not None
    port = nc.connected_url.port
    return next(name for name in cluster.names if cluster.node(name).port == port)


async def _lose_quorum(cluster: EmbeddedCluster, keep: str) -> list[str]:
    """SIGKILL every node but `keep`: no stream, consumer or metadata group has a majority."""
    gone = [name for name in cluster.names if name != keep]
    for name in gone:
        await asyncio.to_thread(cluster.kill, name)
    return gone


async def _regain_quorum(cluster: EmbeddedCluster, gone: list[str]) -> None:
    for name in gone:
        await asyncio.to_thread(cluster.restart, name)


async def _answering(js: JetStreamContext, ns: Namespace) -> None:
    """Wait until the cluster creates consumers again (its metadata leader caught up): a
    consumer's creation is refused `503` for a while after quorum returns."""

    async def probe() -> None:
        name = f"probe{uuid.uuid4().hex[:8]}"
        await js.add_consumer(ns.stream("events"), ConsumerConfig(name=name))
        await js.delete_consumer(ns.stream("events"), name)

    await through_elections(probe, "a probe consumer")


class _Heard(logging.Handler):
    """Sets `heard` when a record's message starts with `prefix` (an event to wait on)."""

    def __init__(self, prefix: str) -> None:
        super().__init__(logging.DEBUG)
        self._prefix = prefix
        self.heard = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(self._prefix):
            self.heard.set()


async def _version_in_force(store: BundleStore, version: int, timeout: float = 30.0) -> None:
    async def reached() -> None:
        while store.bundle is None or store.bundle.version < version:
            store.changed.clear()
            await store.changed.wait()

    await asyncio.wait_for(reached(), timeout)


async def test_the_policy_watch_opens_through_lost_quorum_and_misses_no_bundle(
    cluster: EmbeddedCluster, namespace: Namespace, tmp_path: Path
) -> None:
    signer = Signer.create(tmp_path)
    async with _client(cluster) as nc:
        js = nc.jetstream()
        assert await provision(js, namespace) == 3
        await publish_bundle(js, namespace, signer.sign(make_bundle(1)))
        store = BundleStore(
            await js.key_value(namespace.bucket("policy")),
            load_public_keys([str(signer.pub_path)]),
            "test",
        )
        await store.load()
        assert store.bundle is not None and store.bundle.version == 1
        # Published after the load and before the watch is open: it must not be skipped.
        await publish_bundle(js, namespace, signer.sign(make_bundle(2)))

        gone = await _lose_quorum(cluster, keep=_node_of(cluster, nc))
        heard = _Heard(ASKING_AGAIN)
        logging.getLogger("parley.bus.elections").addHandler(heard)
        stopping = asyncio.Event()
        watch = asyncio.create_task(store.watch(stopping))
        try:
            asked = asyncio.create_task(heard.heard.wait())
            await asyncio.wait({asked, watch}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
            asked.cancel()
            if watch.done():  # the watch's request failed and nothing asked again
                raise AssertionError(f"the policy watch ended: {watch.exception()!r}")
            assert heard.heard.is_set(), "the watch's request was never refused"
            await _regain_quorum(cluster, gone)
            await _version_in_force(store, 2)
            newer = signer.sign(make_bundle(3))  # the test's own publish, right after the
            # election, is asked again like any request then (a retry stores it twice at most)
            await through_elections(
                lambda: publish_bundle(js, namespace, newer), "publishing a bundle"
            )
            await _version_in_force(store, 3)
            assert not watch.done()
        finally:
            logging.getLogger("parley.bus.elections").removeHandler(heard)
            stopping.set()
            await asyncio.wait_for(watch, 10)


async def test_an_open_policy_watch_recovers_after_lost_quorum(
    cluster: EmbeddedCluster, namespace: Namespace, tmp_path: Path
) -> None:
    """Open before the outage: nats-py's ordered consumer re-creates itself afterwards from
    the last revision it delivered, so a bundle published after the outage is applied."""
    signer = Signer.create(tmp_path)
    async with _client(cluster) as nc:
        js = nc.jetstream()
        assert await provision(js, namespace) == 3
        await publish_bundle(js, namespace, signer.sign(make_bundle(1)))
        store = BundleStore(
            await js.key_value(namespace.bucket("policy")),
            load_public_keys([str(signer.pub_path)]),
            "test",
        )
        await store.load()
        stopping = asyncio.Event()
        watch = asyncio.create_task(store.watch(stopping))
        try:
            await publish_bundle(js, namespace, signer.sign(make_bundle(2)))
            await _version_in_force(store, 2)  # the watch is open and delivering
            gone = await _lose_quorum(cluster, keep=_node_of(cluster, nc))
            await _regain_quorum(cluster, gone)
            newer = signer.sign(make_bundle(3))
            await through_elections(
                lambda: publish_bundle(js, namespace, newer), "publishing a bundle"
            )
            await _version_in_force(store, 3, timeout=45)
            assert not watch.done()
        finally:
            stopping.set()
            await asyncio.wait_for(watch, 10)


def _start_auditor(
    cluster: EmbeddedCluster, ns: Namespace, keys: AuditorKeys, directory: Path
) -> ProcessOutput:
    """The auditor on the cluster, a short lease (an outage outlasts it), not provisioning
    (so that its own start meets the outage, not the provisioner's bounded retries)."""
    config = directory / "auditor.toml"
    config.write_text(
        "ack_wait_s = 2.0\nmax_deliver = 100\ngrace_s = 5.0\nprovision = false\n"
        "[options]\n"
        f'signing_key = "{keys.private_path}"\n'
        'tenant = "demo"\ncheckpoint_s = 0.5\nlease_s = 2.0\n'
    )
    env = parley_env(cluster.url, ns.root, allow_lazy_fsync="true")
    return start_actor("auditor", "auditor", env, "--config", str(config))


async def _recorded(nc: NATS, js: JetStreamContext, ns: Namespace, objective: str) -> None:
    """Publish a refused call and wait until the auditor appends its record."""
    records = await nc.subscribe(f"{ns.root}.audit.demo.*")
    try:
        fact = decision("p1", "x", allowed=False, objective=objective)
        await through_elections(  # right after an election, like any request (deduplicated)
            lambda: js.publish(ns.decisions(fact.sender), encode(fact), headers={MSG_ID: fact.id}),
            "publishing a fact",
        )
        while True:
            message = await records.next_msg(timeout=30)
            if fact.envelope_id.encode() in message.data:
                return
    finally:
        await records.unsubscribe()


async def test_the_auditor_starts_and_keeps_its_lease_through_lost_quorum(
    cluster: EmbeddedCluster, namespace: Namespace, tmp_path: Path
) -> None:
    keys = AuditorKeys(tmp_path)
    async with _client(cluster) as nc:
        js = nc.jetstream()
        assert await provision(js, namespace) == 3
        gone = await _lose_quorum(cluster, keep=_node_of(cluster, nc))
        auditor = _start_auditor(cluster, namespace, keys, tmp_path)
        try:
            # Starting: the lease (opening its bucket, taking it) meets the outage. Held
            # (SIGSTOP) until the cluster creates consumers again: binding its own consumers
            # is the runtime's (bus/_consumer.py), not what this test is about.
            await auditor.wait_line(ASKING_AGAIN, timeout=30)
            auditor.signal(signal.SIGSTOP)
            await _regain_quorum(cluster, gone)
            await _answering(js, namespace)
            auditor.signal(signal.SIGCONT)
            await auditor.wait_line(READY, timeout=40)
            await _recorded(nc, js, namespace, "before the outage")

            # Holding the lease: its renewals fail past its time, so it lapses, not exits.
            mark = len(auditor.lines)
            gone = await _lose_quorum(cluster, keep=_node_of(cluster, nc))
            await auditor.wait_line("lease lapsed", start=mark, timeout=30)
            await _regain_quorum(cluster, gone)
            await auditor.wait_line("appending again", start=mark, timeout=30)
            await _recorded(nc, js, namespace, "after the outage")
            assert auditor.process.poll() is None, "the auditor exited"
            # Appends refused or unanswered during the outages left no hole in the chain.
            report = await verify_stream(
                js, namespace.stream("audit"), trusted={key_id(keys.public): keys.public}
            )
            assert report.ok and not report.foreign, report
        finally:
            auditor.close()


async def test_a_gate_started_without_quorum_is_ready_and_decides_once_quorum_returns(
    cluster: EmbeddedCluster, namespace: Namespace, tmp_path: Path
) -> None:
    """The gate's start (its buckets' look-ups, the id claims' server check) and the binding
    of its consumer meet lost quorum: each is asked again, and once quorum returns the gate
    is ready and decides. (Each used to end the process: exit 3, a supervisor's restart.)"""
    signer = Signer.create(tmp_path)
    bundle = make_bundle(
        cli={"start_traces": True, "speaks_for_person": True, "allowed_targets": ("a",)}, a={}
    )
    async with _client(cluster) as nc:
        js = nc.jetstream()
        assert await provision(js, namespace) == 3
        await publish_bundle(js, namespace, signer.sign(bundle))
        decisions = await Decisions(js, namespace).open()
        gone = await _lose_quorum(cluster, keep=_node_of(cluster, nc))
        gate = start_gate(
            cluster.url, namespace, signer, provision="false", allow_lazy_fsync="true"
        )
        try:
            await gate.wait_line(ASKING_AGAIN, timeout=30)
            await _regain_quorum(cluster, gone)
            await gate.wait_line(READY, timeout=60)
            root = HumanMessage(
                id=new_id(), created_at=utc_now(), text="hello", call_id=new_id(), target="a"
            )
            await through_elections(
                lambda: submit(js, namespace, "cli", root), "submitting a message"
            )
            # The test's own reader meets the same elections: its consumer may still be
            # without a leader (503) just after quorum returned.
            decision = await through_elections(
                lambda: decisions.until(root.id, timeout=30), "reading the decision"
            )
            assert decision.allowed, decision
            assert gate.process.poll() is None, "the gate exited"
        finally:
            gate.close()


async def test_reading_the_history_back_rides_through_lost_quorum(
    cluster: EmbeddedCluster, namespace: Namespace
) -> None:
    """A stream's info (and an ordered consumer) is answered only by its leader: a chaos run's
    read-back just after a fault, or `parley audit verify`, met an election as a 5 s timeout
    and failed (CI, `parley chaos --cluster 3` killing the submit leader). Both ask again."""
    async with _client(cluster) as nc:
        js = nc.jetstream()
        assert await provision(js, namespace) == 3
        timeline = namespace.events("cli", "s1")
        await js.publish(timeline, b"an event", stream=namespace.stream("events"))
        gone = await _lose_quorum(cluster, keep=_node_of(cluster, nc))
        heard = _Heard(ASKING_AGAIN)
        logging.getLogger("parley.bus.elections").addHandler(heard)

        async def read_back() -> tuple[ChainReport, list[Stored]]:
            return await asyncio.gather(
                verify_stream(js, namespace.stream("audit"), trusted={}),
                read_stream(js, namespace.stream("events"), namespace.wildcard("events")),
            )

        reading = asyncio.create_task(read_back())
        try:
            asked = asyncio.create_task(heard.heard.wait())
            await asyncio.wait({asked, reading}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
            asked.cancel()
            if reading.done():  # a request failed and nothing asked again
                raise AssertionError(f"the read-back ended: {reading.exception()!r}")
            await _regain_quorum(cluster, gone)
            report, events = await asyncio.wait_for(reading, 60)
        finally:
            logging.getLogger("parley.bus.elections").removeHandler(heard)
        assert report.ok and report.records == 0, report
        assert [e.subject for e in events] == [timeline]
