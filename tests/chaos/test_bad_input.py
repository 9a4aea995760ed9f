"""Bad input at every actor's input: none crashes, each bad message is dead-lettered with its
typed reason, and good traffic sent alongside is all delivered.

Real processes on the real server: the gate (bad bytes on a sender's submit subject), the echo
actor, a scripted agent host and the router (bad bytes on their deliver subjects, as if the
gate had sent them) and the auditor (bad bytes on an events subject). The cases are
hypothesis-generated plus named edge cases; `PARLEY_BAD_INPUTS` (default 10,000) sets how many.
The oracle is the public decoder and header parser the runtime uses:
every case they refuse must come back as exactly one dead letter carrying that reason and the
case's stream sequence, and no valid case may be dead-lettered (except by the router, which
files its own typed refusals of valid input there too). Between the bad cases, good
messages go from `cli` through the gate to echo; the chaos checker then proves none was lost.
Every dead letter, the auditor's own included, ends up as exactly one audit record.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import PubAck

from bus import (
    DEAD_ACTOR,
    DEAD_DETAIL,
    DEAD_REASON,
    DEAD_SEQ,
    DEAD_STREAM,
    MSG_ID,
    SENDER,
    EmbeddedServer,
)
from schemas import (
    AgentCall,
    AuditRecord,
    Decision,
    DecodeError,
    HumanMessage,
    Namespace,
    decode_envelope,
    encode,
    new_id,
    utc_now,
)
from tests.support.audit import AuditorKeys, start_auditor
from tests.support.badinput import (
    BadCase,
    bad_cases,
    crafted_cases,
    expected_reason,
    header_sender,
)
from tests.support.gate import Signer, make_bundle, publish_bundle, start_gate
from tests.support.processes import READY, REPO, ProcessOutput, parley_env, start_actor
from tools._chaos_checker import Published, check_history
from tools._chaos_records import history_from, read_dead_letters, read_stream

pytestmark = pytest.mark.chaos

COUNT = int(os.environ.get("PARLEY_BAD_INPUTS", "10000"))
# About 25 s for 10,000 on two busy cores; `PARLEY_BAD_INPUTS` makes a quicker local run.
GOOD_EVERY = 100
SHARES = {"gate": 30, "echo": 20, "gpt": 20, "router": 15, "auditor": 15}
"""Percent of the cases published at each actor's input."""
CHUNK = 500


@dataclass
class World:
    js: JetStreamContext
    ns: Namespace
    processes: list[ProcessOutput]


@pytest.fixture
async def world(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> AsyncIterator[World]:
    js = nc.jetstream()
    signer = Signer.create(tmp_path)
    bundle = make_bundle(
        # Rates no burst of good traffic reaches: a refusal here would not be about bad input.
        cli={
            "start_traces": True,
            "speaks_for_person": True,
            "allowed_targets": ("echo", "gpt"),
            "rate_per_minute": 60000,
        },
        echo={"allowed_targets": ("cli",), "rate_per_minute": 60000},
        gpt={"allowed_targets": ("cli", "router")},
    )
    await publish_bundle(js, namespace, signer.sign(bundle))
    settings = {"ack_wait_s": os.environ.get("PARLEY_BAD_ACK_WAIT_S", "5")}
    env = parley_env(nats_server.url, namespace.root, **settings)
    processes = [
        start_gate(nats_server.url, namespace, signer, **settings),
        start_actor("echo", "echo", env),
        start_actor("agent", "gpt", env, "--profile", str(REPO / "deploy/agents/gpt.toml")),
        start_actor("router", "router", env),
        start_auditor(nats_server.url, namespace, AuditorKeys(tmp_path), tmp_path),
    ]
    try:
        for process in processes:
            await process.wait_line(READY)
        yield World(js, namespace, processes)
    finally:
        for process in processes:
            process.close()


async def _publish_all(
    js: JetStreamContext, items: list[tuple[str, bytes, dict[str, str]]]
) -> list[PubAck]:
    """Pipelined publishes, acks awaited per chunk with a timeout (a refused publish_async
    never resolves its future)."""
    acks: list[PubAck] = []
    for start in range(0, len(items), CHUNK):
        futures = [
            await js.publish_async(subject, payload, headers=headers or None)
            for subject, payload, headers in items[start : start + CHUNK]
        ]
        async with asyncio.timeout(60):
            acks.extend(await asyncio.gather(*futures))
    return acks


def _good(target: str) -> HumanMessage:
    return HumanMessage(
        id=new_id(), created_at=utc_now(), text="good", call_id=new_id(), target=target
    )


async def test_no_actor_dies_of_bad_input_and_good_traffic_gets_through(world: World) -> None:
    js, ns = world.js, world.ns
    share = {name: COUNT * part // 100 for name, part in SHARES.items()}
    share["gate"] += COUNT - sum(share.values())
    subject_of = {
        "gate": ns.submit("cli"),
        "echo": ns.deliver("echo"),
        "gpt": ns.deliver("gpt"),
        "router": ns.deliver("router"),
        "auditor": ns.events("badinput"),
    }
    sender_of: dict[str, Callable[[BadCase], str]] = {
        "gate": lambda case: "cli",
        "echo": header_sender,
        "gpt": header_sender,
        "router": header_sender,
        "auditor": header_sender,
    }
    items: list[tuple[str, bytes, dict[str, str]]] = []
    owners: list[str] = []
    good: list[HumanMessage] = []
    for actor, count in share.items():
        cases = crafted_cases(actor) + bad_cases(count, actor)
        for index, case in enumerate(cases):
            items.append((subject_of[actor], case.payload, case.headers))
            owners.append(actor)
            if index % GOOD_EVERY == 0:
                message = _good("echo")
                good.append(message)
                items.append((ns.submit("cli"), encode(message), {MSG_ID: message.id}))
                owners.append("")
        # A last valid call to each receiver: its answer comes after everything before it.
    sentinel = AgentCall(
        id=new_id(), created_at=utc_now(), target="gpt", call_id=new_id(), goal="g", text="end"
    )
    items.append((ns.deliver("gpt"), encode(sentinel), {SENDER: "cli", MSG_ID: sentinel.id}))
    owners.append("")
    acks = await _publish_all(js, items)

    expected: dict[tuple[str, int], str] = {}
    for (_subject, payload, headers), owner, ack in zip(items, owners, acks, strict=True):
        if not owner:
            continue
        reason = expected_reason(BadCase(payload, headers), sender_of[owner])
        if reason is not None:
            expected[(ack.stream, ack.seq)] = reason
    assert len(expected) > COUNT // 2  # the generator does produce mostly bad input

    good_ids = {m.id for m in good}
    await _wait_decided(js, ns, good_ids, answers_of={sentinel.id} | good_ids, timeout=80)
    await _follow(js, ns.stream("dead"), f"{ns.root}.dead.>", len(expected), timeout=150)
    letters = await read_stream(js, ns.stream("dead"), f"{ns.root}.dead.>", timeout=30)
    found = {
        (letter.headers[DEAD_STREAM], int(letter.headers[DEAD_SEQ])): letter.headers[DEAD_REASON]
        for letter in letters
    }
    wrong = {
        key: (found.get(key), want) for key, want in expected.items() if found.get(key) != want
    }
    assert not wrong, f"{len(wrong)} cases dead-lettered wrongly, e.g. {list(wrong.items())[:5]}"
    extra = [
        (letter.headers[DEAD_REASON], letter.headers.get(DEAD_DETAIL, "")[:200])
        for letter in letters
        if (letter.headers[DEAD_STREAM], int(letter.headers[DEAD_SEQ])) not in expected
        # The router files its own refusals of valid input (a duplicate opening message, an
        # unknown session) as dead letters too, each with its typed reason.
        and letter.headers.get(DEAD_ACTOR) != "router"
    ]
    assert not extra, f"valid messages dead-lettered: {extra[:5]}"

    for process in world.processes:
        assert process.process.poll() is None, f"{process.name} died"

    audited = await _dead_letter_records(js, ns, len(letters), timeout=60)
    assert sorted((r.source_stream, r.source_seq) for r in audited) == sorted(
        (letter.headers[DEAD_STREAM], int(letter.headers[DEAD_SEQ])) for letter in letters
    )

    records = await read_stream(js, ns.stream("events"), f"{ns.root}.decisions.>", timeout=30)
    roots = [Published(m.id, 0, "gate", "human_message") for m in good]
    history = history_from(records, roots, answering=("echo",))
    report = check_history(history.published, history.applied, stored_ids=history.stored_ids)
    assert report.violations() == [], (report.duplicate_effects[:3], report.lost[:3])
    admitted = {
        r.envelope.envelope_id
        for r in records
        if isinstance(r.envelope, Decision) and r.envelope.allowed
    }
    assert admitted >= {m.id for m in good}, "good traffic was refused"
    echoed = {a.envelope_id for a in history.applied if a.handler == "echo"}
    assert echoed >= {m.id for m in good}


async def _follow(
    js: JetStreamContext, stream: str, subject: str, count: int, timeout: float
) -> None:
    """Wait until `stream` holds `count` messages on `subject` (reading them, not sleeping)."""
    sub = await js.subscribe(subject, stream=stream, ordered_consumer=True)
    try:
        async with asyncio.timeout(timeout):
            for _ in range(count):
                await sub.next_msg(timeout=timeout)
    finally:
        await sub.unsubscribe()


def _is_dead_letter_record(data: bytes) -> bool:
    try:
        record = decode_envelope(data)
    except DecodeError:
        return False  # a checkpoint
    return isinstance(record, AuditRecord) and record.fact == "dead_letter"


async def _dead_letter_records(
    js: JetStreamContext, ns: Namespace, count: int, timeout: float
) -> list[AuditRecord]:
    """Follow the audit stream until it holds `count` dead-letter records; then one more read
    of the whole stream, so a record too many would be seen too."""
    sub = await js.subscribe(f"{ns.root}.audit.>", stream=ns.stream("audit"), ordered_consumer=True)
    found = 0
    try:
        async with asyncio.timeout(timeout):
            while found < count:
                msg = await sub.next_msg(timeout=timeout)
                found += _is_dead_letter_record(msg.data)
    finally:
        await sub.unsubscribe()
    stored = await read_stream(js, ns.stream("audit"), f"{ns.root}.audit.>", timeout=30)
    return [
        r.envelope
        for r in stored
        if isinstance(r.envelope, AuditRecord) and r.envelope.fact == "dead_letter"
    ]


async def _wait_decided(
    js: JetStreamContext,
    ns: Namespace,
    ids: set[str],
    *,
    answers_of: set[str],
    timeout: float = 120,
) -> None:
    """Follow the decisions until each of `ids` is decided and each of `answers_of` answered."""
    sub = await js.subscribe(
        f"{ns.root}.decisions.>", stream=ns.stream("events"), ordered_consumer=True
    )
    waiting, unanswered = set(ids), set(answers_of)
    try:
        async with asyncio.timeout(timeout):
            while waiting or unanswered:
                msg = await sub.next_msg(timeout=timeout)
                decision = decode_envelope(msg.data)
                assert isinstance(decision, Decision)
                waiting.discard(decision.envelope_id)
                unanswered.discard(decision.causation_id)
    except TimeoutError:
        states = [
            f"{name}: pending {info.num_pending}, unacked {info.num_ack_pending}, "
            f"waiting pulls {info.num_waiting}"
            for name, info in [
                ("gate", await js.consumer_info(ns.stream("submit"), "gate")),
                ("echo", await js.consumer_info(ns.stream("deliver"), "echo")),
            ]
        ]
        dead = await read_dead_letters(js, ns)
        stored = await read_stream(js, ns.stream("events"), f"{ns.root}.decisions.>")
        causes = {r.envelope.causation_id for r in stored if isinstance(r.envelope, Decision)}
        raise AssertionError(
            f"undecided: {len(waiting)} of {len(ids)}; unanswered: {len(unanswered)} "
            f"({len(unanswered - causes)} by a fresh read of the stream); {states}; "
            f"dead letters: {dict(dead)}"
        ) from None
    finally:
        await sub.unsubscribe()
