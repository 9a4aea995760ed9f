"""Issue 30, finding 5: one agent could fill the disk with its own credentials. Now it stops at
its quotas (docs/quotas.md), which the broker enforces, and nobody else pays for it.

Every test but the last runs the least-privilege config of `parley nats-config` on a real
nats-server, with real actor processes; the attacker is a raw nats-py client holding gpt's own
credentials (or, beside a collaboration of gpt and claude, mallory's: an agent of its own that
takes no part), and the quotas are the provisioner's settings, made small so a flood reaches them
in a few messages:

- large values on mallory's own wait keys stop at its own waits bucket's bytes, a quarantine mark
  larger than a delivery number is refused, and its submissions stop at its own per-sender
  bound while the gate is held up; a collaboration of the person, gpt and claude completes;
- its garbage submissions become dead letters bounded under its own name: the gate drops its
  oldest, says so, and claude's older dead letter stays;
- a person's refused openings, which the router dead-letters, are bounded under that person
  too: a flood from `cli` keeps `person-alice`'s older letter the router filed;
- `parley provision` on a deployment made before quotas puts them on its streams and buckets,
  and deletes the agents' shared waits bucket, which nothing reads since each has its own.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.js.api import KeyValueConfig, StreamConfig
from nats.js.errors import APIError, NotFoundError

from bus import (
    BUCKETS,
    MSG_ID,
    EmbeddedServer,
    Input,
    TraceHeaders,
    consumer_config,
    stream_configs,
)
from schemas import Namespace, decode_envelope, encode, new_id
from tests.support.lockdown import LOCKED_ACTORS, LockedDown
from tests.support.processes import ProcessOutput, parley_env
from tests.support.system import finished, parley_cli, running_locked_system
from tests.support.wire import human
from tools.demo import DEMO_GOAL
from tools.natsconf import write_nats_config

MIB = 1024 * 1024
_PER_SENDER = 4
ALICE = "person-alice"
_DEAD_PER_SENDER = 3
_QUOTAS = (
    f"{{ per_sender = {_PER_SENDER}, dead_letters_per_sender = {_DEAD_PER_SENDER}, "
    f"bucket_bytes = {{ waits = {2 * MIB} }} }}"
)


def _locked_with(tmp_path: Path, namespace: Namespace, extra: str) -> Iterator[LockedDown]:
    """`locked_down` with one more principal, `extra`."""
    config_dir = tmp_path / "nats-config"
    write_nats_config(config_dir, [*LOCKED_ACTORS, extra], namespace)
    server = EmbeddedServer(tmp_path / "nats", authorization=config_dir / "authorization.conf")
    server.start()
    yield LockedDown(server, config_dir, namespace)
    server.close()


@pytest.fixture
def with_mallory(tmp_path: Path, namespace: Namespace) -> Iterator[LockedDown]:
    """`locked_down` with one more agent, mallory, that no collaboration calls."""
    yield from _locked_with(tmp_path, namespace, "mallory")


@pytest.fixture
def with_alice(tmp_path: Path, namespace: Namespace) -> Iterator[LockedDown]:
    """`locked_down` with a second person, person-alice, beside `cli`."""
    yield from _locked_with(tmp_path, namespace, ALICE)


async def _dead_counts(locked: LockedDown) -> dict[str, int]:
    """How many dead letters PARLEY_DEAD holds per subject, looked at as the provisioner."""
    admin = await locked.connect("provisioner")
    try:
        info = await admin.jetstream().stream_info(
            locked.ns.stream("dead"), subjects_filter=f"{locked.ns.root}.dead.>"
        )
        return dict(info.state.subjects or {})
    finally:
        await admin.close()


async def _until(
    condition: Callable[[], Awaitable[bool]], what: str, timeout: float = 30.0
) -> None:
    """Poll a condition on stream state (a lookup: nothing publishes it) with a bound."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


async def test_one_agents_flood_stops_at_its_quota_while_a_collaboration_completes(
    with_mallory: LockedDown, tmp_path: Path
) -> None:
    locked, ns = with_mallory, with_mallory.ns
    locked.tune("provisioner", quotas=_QUOTAS)
    async with running_locked_system(
        locked, tmp_path / "keys", agents={"gpt": "gpt", "claude": "claude"}
    ) as system:
        mallory = await locked.connect("mallory")
        try:
            js = locked.js(mallory, "mallory")
            # Large values on keys its grants allow: its own waits stop at its bucket's bytes.
            waits = await js.key_value(ns.agent_bucket("waits", "mallory"))
            value = b"w" * (mallory.max_payload - 4096)
            stored = 0
            with pytest.raises(APIError) as full:
                for index in range(8):
                    await waits.put(f"mallory.flood.{index}", value)
                    stored += 1
            assert "maximum bytes" in str(full.value).lower(), full.value
            assert stored * len(value) <= 2 * MIB

            # A quarantine mark holds a delivery number, nothing larger; in its own bucket,
            # which it can fill for itself only (docs/quotas.md).
            marks = await js.key_value(ns.agent_bucket("marks", "mallory"))
            with pytest.raises(APIError) as large:
                await marks.put("handling.mallory.flood.1", b"m" * 4096)
            assert "message size" in str(large.value).lower(), large.value

            # Submissions of 1 MiB, the gate held up: its own backlog stops at its bound.
            gate = system.processes["gate"]
            gate.signal(signal.SIGSTOP)
            garbage = b"\xff" * (mallory.max_payload - 4096)
            accepted = 0
            try:
                with pytest.raises(APIError) as refused:
                    for _ in range(_PER_SENDER + 4):
                        await js.publish(ns.submit("mallory"), garbage, headers={MSG_ID: new_id()})
                        accepted += 1
            finally:
                gate.signal(signal.SIGCONT)
            assert "maximum messages per subject" in str(refused.value).lower(), refused.value
            assert accepted == _PER_SENDER
        finally:
            await mallory.close()

        # Another principal's collaboration completes beside the flood.
        env = parley_env(locked.server.url, ns.root)
        cli = ("collab", "--config", str(locked.settings_file("cli")), DEMO_GOAL)
        code, lines = await finished(parley_cli(env, *cli), 120)
        assert code == 0 and any("final" in line for line in lines), lines
        # The gate filed mallory's garbage under mallory, its oldest dropped past the bound.
        filed = ns.dead("gate", "mallory")

        async def bounded() -> bool:
            return (await _dead_counts(locked)).get(filed, 0) == _DEAD_PER_SENDER

        await _until(bounded, "mallory's dead letters")
        await system.processes["gate"].wait_line("dropped the oldest dead letter", timeout=30)


async def _filed_at_least(filer: ProcessOutput, count: int) -> None:
    """Wait until `filer` (an actor process) has logged filing `count` dead letters."""

    async def enough() -> bool:
        return sum("dead-lettered a message" in line for line in filer.lines) >= count

    await _until(enough, f"{count} dead letters filed by {filer.name}")


async def _stored_dead_letters(locked: LockedDown) -> list[tuple[str, bytes]]:
    """Every dead letter PARLEY_DEAD still holds (subject, payload), read as the auditor reads
    them (the one principal allowed to), as many as the stream says it holds."""
    held = sum((await _dead_counts(locked)).values())
    auditor = await locked.connect("auditor")
    try:
        js = auditor.jetstream()
        spec = Input(locked.ns.stream("dead"), locked.ns.wildcard("dead"), "auditor", "subject")
        await js.add_consumer(spec.stream, consumer_config(spec, locked.settings("auditor")))
        reader = await js.pull_subscribe_bind(durable="auditor", stream=spec.stream)
        letters: list[tuple[str, bytes]] = []
        while len(letters) < held:
            fetched = await reader.fetch(held - len(letters), timeout=10)
            letters.extend((msg.subject, msg.data) for msg in fetched)
        return letters
    finally:
        await auditor.close()


async def test_one_senders_dead_letters_never_evict_anothers(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    locked, ns = locked_down, locked_down.ns
    # Room for the whole flood in the submissions: the dead letters' bound is what this shows.
    locked.tune("provisioner", quotas=f"{{ dead_letters_per_sender = {_DEAD_PER_SENDER} }}")
    async with running_locked_system(locked, tmp_path / "keys", agents={}) as system:
        gate = system.processes["gate"]
        gpt, claude = await locked.connect("gpt"), await locked.connect("claude")
        try:
            # claude's garbage first: the oldest dead letter of all.
            await locked.js(claude, "claude").publish(
                ns.submit("claude"), b"{claude's garbage", headers={MSG_ID: new_id()}
            )
            await _filed_at_least(gate, 1)
            flood = 3 * _DEAD_PER_SENDER
            js = locked.js(gpt, "gpt")
            for index in range(flood):
                await js.publish(
                    ns.submit("gpt"), b"{gpt's garbage %d" % index, headers={MSG_ID: new_id()}
                )
            await _filed_at_least(gate, flood + 1)

            letters = await _stored_dead_letters(locked)
            claudes = [subject for subject, data in letters if data == b"{claude's garbage"]
            assert claudes == [ns.dead("gate", "claude")], letters  # kept, under its sender
            gpts = [subject for subject, data in letters if data.startswith(b"{gpt's")]
            assert gpts == [ns.dead("gate", "gpt")] * _DEAD_PER_SENDER, letters
            kept = {data for _subject, data in letters}
            assert b"{gpt's garbage %d" % (flood - 1) in kept  # the newest of gpt's stay
            await gate.wait_line("dropped the oldest dead letter of a sender at its quota")
            told = [line for line in gate.lines if "dropped the oldest dead letter" in line]
            assert all('"sender":"gpt"' in line for line in told), told
        finally:
            await gpt.close()
            await claude.close()


async def test_a_persons_refused_openings_never_evict_another_persons_letters_at_the_router(
    with_alice: LockedDown, tmp_path: Path
) -> None:
    locked, ns = with_alice, with_alice.ns
    locked.tune("provisioner", quotas=f"{{ dead_letters_per_sender = {_DEAD_PER_SENDER} }}")
    async with running_locked_system(locked, tmp_path / "keys", agents={}) as system:
        router = system.processes["router"]
        alice, cli = await locked.connect(ALICE), await locked.connect("cli")
        try:

            async def refused_opening(nc: NATS, person: str) -> str:
                """An opening naming no agent, as a person submits it: the router refuses it
                (INVALID_REQUEST) and dead-letters it."""
                msg = human("nobody is named here")
                headers = TraceHeaders(trace_id=msg.id, origin=person).to_headers(msg.id)
                js = locked.js(nc, person)
                await js.publish(ns.submit(person), encode(msg), headers=headers)
                return msg.id

            alices = await refused_opening(alice, ALICE)  # the oldest letter of all
            await _filed_at_least(router, 1)
            flood = [await refused_opening(cli, "cli") for _ in range(3 * _DEAD_PER_SENDER)]
            await _filed_at_least(router, len(flood) + 1)

            filed = {
                decode_envelope(data).id: subject
                for subject, data in await _stored_dead_letters(locked)
            }
            assert filed.get(alices) == ns.dead("router", ALICE), filed  # kept, under alice
            clis = [filed[id_] for id_ in flood if id_ in filed]
            assert clis == [ns.dead("router", "cli")] * _DEAD_PER_SENDER, filed
            assert flood[-1] in filed  # the newest of the flood stay
            await router.wait_line("dropped the oldest dead letter of a sender at its quota")
        finally:
            await alice.close()
            await cli.close()


async def test_provision_puts_quotas_on_a_deployment_made_before_them(
    nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    ns = namespace
    client = await nats.connect(nats_server.url)
    try:
        js = client.jetstream()
        for config in stream_configs(ns):  # as a release before quotas made them
            old = StreamConfig.from_response(config.as_dict())
            old.max_bytes, old.max_msgs_per_subject, old.discard_new_per_subject = -1, -1, False
            await js.add_stream(old)
        for spec in BUCKETS:
            await js.create_key_value(KeyValueConfig(bucket=ns.bucket(spec.name)))
        retired = f"KV_{ns.bucket('waits')}"  # the agents' shared waits, before each had its own
        await js.create_key_value(KeyValueConfig(bucket=ns.bucket("waits")))

        env = parley_env(nats_server.url, ns.root)
        code, lines = await finished(parley_cli(env, "provision"), 60)
        assert code == 0, lines

        submit = (await js.stream_info(ns.stream("submit"))).config
        assert submit.max_bytes and submit.max_bytes > 0
        assert submit.max_msgs_per_subject > 0 and submit.discard_new_per_subject
        dead = (await js.stream_info(ns.stream("dead"))).config
        assert dead.max_bytes and dead.max_bytes > 0 and dead.max_msgs_per_subject > 0
        for spec in BUCKETS:
            bucket = (await js.stream_info(f"KV_{ns.bucket(spec.name)}")).config
            assert bucket.max_bytes and bucket.max_bytes > 0, spec.name
            assert bucket.max_msg_size and bucket.max_msg_size > 0, spec.name
        with pytest.raises(NotFoundError):  # nothing reads it: gone, and its reservation
            await js.stream_info(retired)
    finally:
        await client.close()
