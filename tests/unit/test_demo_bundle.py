"""The shipped bundles grant their flows whole: a collaboration of seed 001's largest size
(`--max-rounds 100`) runs to its last round through the gate's own decisions, and every
profile an orchestrated session's trace passes through has room for seed 000's largest one
(100 turns)."""

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


DEMO = "deploy/policy/demo.toml"


def _bundle(path: str = DEMO) -> PolicyBundle:
    source = tomllib.loads((REPO / path).read_text())
    return msgspec.convert(source, PolicyBundle)


@pytest.mark.parametrize(
    ("path", "person"),
    [(DEMO, "cli"), (DEMO, "person-alice"), ("examples/collaborate/policy.toml", "cli")],
)
def test_a_hundred_round_collaboration_fits_the_bundles_budgets(path: str, person: str) -> None:
    sim = GateSim(_bundle(path))
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
    profiles = _bundle().profiles
    needed = 1 + 4 * _ROUNDS
    for name in ("cli", "person-alice", "person-bob", "router", "gpt", "claude", "llm"):
        assert profiles[name].trace_message_budget >= needed, name


@pytest.mark.parametrize("path", [DEMO, "examples/orchestrate/policy.toml"])
def test_an_orchestrated_session_of_a_hundred_turns_fits_the_bundles_budgets(path: str) -> None:
    """In `full_auto` every turn stays in one trace: the call to the local agent and its
    draft, the call to the shared agent and its answer, and each one's model call and answer:
    eight envelopes a turn at most."""
    profiles = _bundle(path).profiles
    needed = 1 + 8 * _ROUNDS
    senders = [name for name in ("cli", "router", "local", "claude", "llm") if name in profiles]
    for name in senders:
        assert profiles[name].trace_message_budget >= needed, (path, name)
