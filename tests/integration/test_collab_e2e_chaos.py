"""The router SIGKILLed at random points of a six-round session on the whole path.

Gate, router and two scripted agent hosts run as processes; the session is submitted as the
CLI submits it. One uninterrupted run gives the reference transcript; then, in each run, the
router is killed right after a randomly chosen event of the session's timeline and a new one
takes over. Every run must end at the cap with the reference transcript and one event per
turn.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from bus import EmbeddedServer, TraceHeaders
from schemas import Namespace, TranscriptItem, encode
from tests.support.router_wire import Timeline, collaborate, stored_session
from tests.support.system import System, running_system

RUNS = 5
ROUNDS = 6
GOAL = "Write a long essay, one section per round."
EVENTS = 2 + 2 * ROUNDS + 1  # created, started, a start and an end per turn, completed


async def one_run(
    nc: NATS, ns: Namespace, system: System, kill_after: int | None
) -> tuple[tuple[TranscriptItem, ...], list[int | None], str | None]:
    js = nc.jetstream()
    msg = collaborate(GOAL, max_rounds=ROUNDS, first="gpt")
    assert msg.session_id is not None
    timeline = Timeline(js, ns, msg.session_id)
    await timeline.open()
    headers = TraceHeaders(trace_id=msg.id, origin="cli").to_headers(msg.id)
    await js.publish(ns.submit("cli"), encode(msg), headers=headers)
    seen = 0
    while True:
        await timeline.next(timeout=60)
        seen += 1
        if seen == kill_after:
            await system.kill_and_restart("router")
        last = timeline.events[-1] if timeline.events else None
        if last is not None and last.event_type == "session_completed":
            break
    await timeline.close()
    session = await stored_session(js, ns, msg.session_id)
    rounds = [e.round for e in timeline.events if e.event_type == "step_completed"]
    return session.transcript, rounds, timeline.events[-1].stop_reason


@pytest.mark.chaos
@pytest.mark.timeout(240)
def _said(transcript: tuple[TranscriptItem, ...]) -> list[tuple[str, str, str]]:
    """Who said what, in order: what a kill must not change (each item's time is the run's)."""
    return [(item.role, item.name, item.text) for item in transcript]


async def test_router_killed_on_the_whole_path_gives_the_same_transcript(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    seed = random.randrange(2**32)  # noqa: S311 - kill points, not secrets
    rng = random.Random(seed)  # noqa: S311 - reproducible from the seed in the message
    async with running_system(
        nc, nats_server, namespace, tmp_path / "keys", ack_wait_s="1"
    ) as system:
        reference, rounds, reason = await one_run(nc, namespace, system, None)
        assert reason == "cap_reached" and rounds == list(range(1, ROUNDS + 1))
        said = [item.text for item in reference if item.role in ("gpt", "claude")]
        assert said == [
            f'{("gpt", "claude")[(r - 1) % 2]}: round {r} of {ROUNDS} on "{GOAL}".'
            for r in range(1, ROUNDS + 1)
        ]
        for run in range(RUNS):
            kill_after = rng.randrange(1, EVENTS)
            transcript, rounds, reason = await one_run(nc, namespace, system, kill_after)
            where = f"seed {seed}, run {run}, killed after event {kill_after}"
            assert _said(transcript) == _said(reference), where
            assert rounds == list(range(1, ROUNDS + 1)), where
            assert reason == "cap_reached", where
