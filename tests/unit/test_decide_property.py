"""Random delegation graphs through the gate's pure core: whatever agents try, no admitted
chain is deeper than its limit, revisits an agent, or fans out wider than allowed."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.gate._decide import Allow
from schemas import AnyEnvelope
from tests.support.gatesim import (
    GateSim,
    bundle,
    call,
    delegation,
    delegation_done,
    human,
    response,
    sub_agent,
    sub_agent_done,
)

AGENTS = tuple(f"a{n}" for n in range(5))
LIMITS = {"agent_call": 3, "delegation_request": 2, "sub_agent_call": 4}
FAN_OUT = 2

POLICY = bundle(
    cli={"start_traces": True, "speaks_for_person": True, "allowed_targets": ("router",)},
    router={"start_traces": True, "allowed_targets": AGENTS, "max_concurrent_calls": 1000},
    **{
        agent: {
            "allowed_targets": (*AGENTS, "router"),
            "max_hop_count": LIMITS["agent_call"],
            "max_depth": LIMITS["delegation_request"],
            "max_sub_agent_depth": LIMITS["sub_agent_call"],
            "max_fan_out": FAN_OUT,
            "max_concurrent_calls": 1000,
            "allow_sub_agent_calls": True,
            "rate_per_minute": 100_000,
            "trace_message_budget": 100_000,
        }
        for agent in AGENTS
    },
)

# One step: (which delivered envelope acts, what it does, to whom, a word of objective).
steps = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=10_000),
        st.sampled_from(("agent_call", "delegation_request", "sub_agent_call", "return")),
        st.sampled_from(AGENTS),
        st.sampled_from(("x", "y")),
        st.booleans(),
    ),
    min_size=1,
    max_size=25,
)


def _make(kind: str, sender: str, target: str, word: str, nested: bool) -> AnyEnvelope:
    if kind == "agent_call":
        return call(target, goal=word)
    if kind == "delegation_request":
        return delegation(sender, target, objective=word, user_id="")
    if kind == "sub_agent_call":
        return sub_agent(sender, target, task=word, nested=nested)
    return response(sender)


def _answer(kind: str, sender: str) -> AnyEnvelope:
    if kind == "delegation_request":
        return delegation_done(sender)
    if kind == "sub_agent_call":
        return sub_agent_done(sender)
    return response(sender)


@settings(
    max_examples=3_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)
@given(steps)
def test_random_graphs_never_break_a_limit(plan: list[tuple[int, str, str, str, bool]]) -> None:
    sim = GateSim(POLICY)
    root = human()
    assert isinstance(sim.submit("cli", root), Allow)
    first = call(AGENTS[0])
    assert isinstance(sim.submit("router", first, cause=root.id), Allow)
    # Envelopes delivered to an agent, with the kind of the call that put it there.
    held: list[tuple[str, str, str]] = [(first.id, AGENTS[0], "agent_call")]
    at_work: Counter[str] = Counter()  # a cause's calls not yet answered
    cause_of: dict[str, str] = {}  # an open call's cause
    for pick, kind, target, word, nested in plan:
        cause_id, holder, via = held[pick % len(held)]
        if kind == "return":
            envelope = _answer(via, holder)
        else:
            envelope = _make(kind, holder, target, word, nested)
        outcome = sim.submit(holder, envelope, cause=cause_id)
        if not isinstance(outcome, Allow):
            continue
        position = outcome.route.position
        chain = position.chain
        assert len(set(chain)) == len(chain), f"agent revisited: {chain}"
        if kind != "return":
            assert position.hop <= LIMITS[kind], (kind, position.hop, chain)
            at_work[cause_id] += 1
            assert at_work[cause_id] <= FAN_OUT, f"fan-out of {cause_id}"
            cause_of[envelope.id] = cause_id
            held.append((envelope.id, target, kind))
        else:
            if cause_id in cause_of:  # the call it answers is no longer at work
                at_work[cause_of.pop(cause_id)] -= 1
            if outcome.route.target != "router":
                held.append((envelope.id, outcome.route.target, "agent_call"))
