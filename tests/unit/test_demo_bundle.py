"""The demo bundle grants each seed's flow whole: a collaboration of seed 001's largest size
(`--max-rounds 100`) runs to its last round through the gate's own decisions."""

from __future__ import annotations

import tomllib

import msgspec
import pytest

from actors.gate._decide import Allow
from schemas import PolicyBundle
from tests.support.gatesim import GateSim, call, human, response
from tests.support.processes import REPO

_ROUNDS = 100
"""Seed 001's largest `max_rounds`: each round is one call and its answer in one trace."""


def _demo() -> PolicyBundle:
    source = tomllib.loads((REPO / "deploy" / "policy" / "demo.toml").read_text())
    return msgspec.convert(source, PolicyBundle)


@pytest.mark.parametrize("person", ["cli", "person-alice"])
def test_a_hundred_round_collaboration_fits_the_demo_bundles_budgets(person: str) -> None:
    sim = GateSim(_demo())
    root = human()
    assert isinstance(sim.submit(person, root), Allow)
    cause = root.id
    for round_ in range(_ROUNDS):
        agent = ("claude", "gpt")[round_ % 2]
        turn = call(agent)
        admitted = sim.submit("router", turn, cause=cause)
        assert isinstance(admitted, Allow), (round_, admitted)
        answer = response(agent)
        answered = sim.submit(agent, answer, cause=turn.id)
        assert isinstance(answered, Allow), (round_, answered)
        cause = answer.id


def test_the_budgets_leave_room_for_a_model_call_each_turn() -> None:
    """A gateway brain's turn is four envelopes (the call, its model call and answer, its
    answer): every profile a collaboration's trace passes through has room for them all."""
    profiles = _demo().profiles
    needed = 1 + 4 * _ROUNDS
    for name in ("cli", "person-alice", "person-bob", "router", "gpt", "claude", "llm"):
        assert profiles[name].trace_message_budget >= needed, name
