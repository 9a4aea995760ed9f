"""A router SIGKILLed at random points of a 6-round session loses no turn and repeats none.

One uninterrupted run gives the reference transcript. Then, 20 times, a fresh session runs the
same six rounds while the router is killed once, at a point drawn at random: just before an
agent's answer is delivered, or just after (so the kill lands inside the handler, between its
compare-and-set and its ack, or before either). A new router process takes over from the
durable consumer and the sessions bucket. Every run must end with the reference transcript,
exactly six agent calls (no call re-issued under a new id) and six turn events.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from nats.aio.client import Client as NATS

from bus import EmbeddedServer
from schemas import AgentCall, Namespace, TranscriptItem
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor
from tests.support.router_probe import HANG_AFTER_EFFECTS, HANG_AFTER_STORE
from tests.support.router_wire import (
    AgentTurn,
    RouterWire,
    Timeline,
    collaborate,
    handoff,
    stored_session,
)

GOAL = "Collaborate to outline and refine a 5-step plan for a weekend hiking trip."
RUNS = 20
ROUNDS = 6


def builds_on_what_it_saw(call: AgentCall) -> AgentTurn:
    """A reply that depends on the window, so a lost or repeated turn changes the transcript."""
    latest = call.transcript[-1].text if call.transcript else call.goal
    peer = "gpt" if call.target == "claude" else "claude"
    return handoff(
        f"{call.target} r{call.round} ← {latest[:40]}", peer, f"refine step {call.round}"
    )


@dataclass
class KillAt:
    answer: int
    """Which answer (0-based) the kill is placed around."""
    before: bool
    """Kill before delivering that answer (else right after)."""


@dataclass
class Run:
    transcript: tuple[TranscriptItem, ...]
    call_ids: list[str]
    turn_rounds: list[int | None]
    stop_reason: str | None


class RouterProcess:
    def __init__(self, server: EmbeddedServer, ns: Namespace) -> None:
        self._env = parley_env(server.url, ns.root, ack_wait_s="1", backoff_s="[0.05]")
        self.process: ProcessOutput | None = None
        self.kills = 0

    async def start(self) -> None:
        self.process = start_actor("router", "router", self._env)
        await self.process.wait_line(READY)

    async def kill_and_restart(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.close()
        self.kills += 1
        await self.start()

    def close(self) -> None:
        if self.process is not None:
            self.process.close()


async def one_run(
    nc: NATS, ns: Namespace, wire: RouterWire, router: RouterProcess, kill: KillAt | None
) -> Run:
    js = nc.jetstream()
    msg = collaborate(GOAL, max_rounds=ROUNDS)
    assert msg.session_id is not None
    timeline = Timeline(js, ns, msg.session_id)
    await timeline.open()
    await wire.start(msg)
    calls: list[AgentCall] = []
    while len(calls) < ROUNDS:
        trace, envelope = await wire.submitted(timeout=30)
        if not isinstance(envelope, AgentCall) or envelope.id in wire.seen_calls:
            continue  # a duplicate would be dropped by JetStream; this guards the test itself
        wire.seen_calls.add(envelope.id)
        calls.append(envelope)
        index = len(calls) - 1
        if kill is not None and kill.answer == index and kill.before:
            await router.kill_and_restart()
        await wire.answer(envelope, trace, builds_on_what_it_saw(envelope))
        if kill is not None and kill.answer == index and not kill.before:
            await router.kill_and_restart()
    end = await timeline.until_end(timeout=60)
    await timeline.close()
    session = await stored_session(js, ns, msg.session_id)
    return Run(
        transcript=session.transcript,
        call_ids=[c.id for c in calls],
        turn_rounds=[e.round for e in timeline.events if e.event_type == "step_completed"],
        stop_reason=end.stop_reason,
    )


@pytest.mark.chaos
@pytest.mark.timeout(300)
def _said(transcript: tuple[TranscriptItem, ...]) -> list[tuple[str, str, str]]:
    """Who said what, in order: what a kill must not change (each item's time is the run's)."""
    return [(item.role, item.name, item.text) for item in transcript]


async def test_router_killed_at_random_points_twenty_times_gives_the_same_transcript(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    seed = random.randrange(2**32)  # noqa: S311 - kill points, not secrets
    rng = random.Random(seed)  # noqa: S311 - reproducible from the printed seed
    wire = RouterWire(nc.jetstream(), namespace)
    await wire.open()
    router = RouterProcess(nats_server, namespace)
    try:
        await router.start()
        reference = await one_run(nc, namespace, wire, router, kill=None)
        assert reference.stop_reason == "cap_reached"
        assert len([i for i in reference.transcript if i.role in ("gpt", "claude")]) == ROUNDS
        for run_number in range(RUNS):
            kill = KillAt(answer=rng.randrange(ROUNDS), before=rng.random() < 0.5)
            run = await one_run(nc, namespace, wire, router, kill)
            where = f"seed {seed}, run {run_number}, {kill}"
            assert _said(run.transcript) == _said(reference.transcript), where
            assert len(set(run.call_ids)) == ROUNDS, where
            assert run.turn_rounds == list(range(1, ROUNDS + 1)), where
            assert run.stop_reason == "cap_reached", where
        assert router.kills == RUNS
    finally:
        router.close()


HANGING = "support.router_probe:HangingRouter"


@pytest.mark.chaos
@pytest.mark.parametrize(
    ("hang", "line"),
    [
        (HANG_AFTER_STORE, "stored, effects not published"),
        (HANG_AFTER_EFFECTS, "stored and effects published, not acked"),
    ],
)
async def test_a_kill_between_the_stored_turn_and_the_ack_neither_loses_nor_repeats_it(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, hang: str, line: str
) -> None:
    js = nc.jetstream()
    wire = RouterWire(js, namespace)
    await wire.open()
    env = parley_env(nats_server.url, namespace.root, ack_wait_s="1")
    router = start_actor(HANGING, "router", env)
    try:
        await router.wait_line(READY)
        msg = collaborate(GOAL, max_rounds=3)
        assert msg.session_id is not None
        timeline = Timeline(js, namespace, msg.session_id)
        await timeline.open()
        await wire.start(msg)
        calls: list[AgentCall] = []
        while len(calls) < 3:
            trace, call = await wire.submitted()
            assert isinstance(call, AgentCall) and call.id not in {c.id for c in calls}
            calls.append(call)
            text = hang if call.round == 2 else f"{call.target} r{call.round}"
            await wire.answer(call, trace, handoff(text, "gpt", "next"))
            if call.round == 2:
                await router.wait_line(line)
                router.kill()
                router.close()
                router = start_actor(HANGING, "router", env)
                await router.wait_line(READY)
        end = await timeline.until_end()
        assert end.stop_reason == "cap_reached"
        assert [e.round for e in timeline.events if e.event_type == "step_completed"] == [1, 2, 3]
        session = await stored_session(js, namespace, msg.session_id)
        texts = [item.text for item in session.transcript]
        assert texts.count(hang) == 1 and texts[-1] == "gpt r3"
        assert [c.round for c in calls] == [1, 2, 3]
        await timeline.close()
    finally:
        router.close()
