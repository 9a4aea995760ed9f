"""Issue 30, Build item 5: the gate checks an answer's body against the call it answers, and
refuses a call that repeats one still in flight, through the pure core (plan and decide).

An answer names its call in its body (an agent_response's `call_id` and `session_id`, a
delegation_response's `request_id`, a sub_agent_result's `call_id`); the gate records what the
call it delivered named, on the level that call opened, and refuses an answer naming anything
else as `FORGED_HEADER` (rule `answer_names_another_call`). A repeated call (same caller,
target and objective, a new id) while the first is in flight is seed 003's cycle,
`CYCLE_DETECTED` (rule `objective_in_progress`), for an agent_call as for a delegation.
"""

from __future__ import annotations

from typing import Any

from msgspec import structs

from actors.gate._decide import Allow
from actors.gate._plan import Deny
from actors.gate._records import Position, position_key
from schemas import AgentCall, Error, ErrorCode, new_id, utc_now
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

PROFILES: dict[str, dict[str, Any]] = {
    "cli": {"start_traces": True, "speaks_for_person": True, "allowed_targets": ("router",)},
    "router": {"start_traces": True, "allowed_targets": ("a", "b"), "max_concurrent_calls": 100},
    "a": {
        "allowed_targets": ("b", "router"),
        "allow_sub_agent_calls": True,
        "max_concurrent_calls": 10,
    },
    "b": {"allowed_targets": ("a", "router")},
}


def _sim() -> GateSim:
    return GateSim(bundle(**PROFILES))


def _ok(outcome: Allow | Deny) -> Allow:
    assert isinstance(outcome, Allow), outcome
    return outcome


def _refused(outcome: Allow | Deny, code: ErrorCode, rule: str) -> Deny:
    assert isinstance(outcome, Deny), outcome
    assert (outcome.code, outcome.rule) == (code, rule), outcome
    return outcome


def _session_call(sim: GateSim, target: str) -> AgentCall:
    """A person's message (a trace of its own), then the router's call of `target` in a
    session: returns the call as delivered."""
    root = human()
    _ok(sim.submit("cli", root))
    made = structs.replace(call(target), session_id=new_id())
    _ok(sim.submit("router", made, cause=root.id))
    return made


def test_an_answer_naming_another_agents_call_is_refused() -> None:
    """The finding: a's answer is caused by a's own call, but its body names b's call (its
    `call_id` and `session_id`, as a transcript or a guess would give them)."""
    sim = _sim()
    to_a, to_b = _session_call(sim, "a"), _session_call(sim, "b")
    forged = structs.replace(response("a"), call_id=to_b.call_id, session_id=to_b.session_id)
    refused = _refused(
        sim.submit("a", forged, cause=to_a.id, as_is=True),
        ErrorCode.FORGED_HEADER,
        "answer_names_another_call",
    )
    assert to_b.call_id in refused.message and to_a.call_id in refused.message
    # b's call is still open to b's own answer, and a's to a's.
    honest = structs.replace(response("b"), call_id=to_b.call_id, session_id=to_b.session_id)
    _ok(sim.submit("b", honest, cause=to_b.id, as_is=True))
    own = structs.replace(response("a"), call_id=to_a.call_id, session_id=to_a.session_id)
    _ok(sim.submit("a", own, cause=to_a.id, as_is=True))


def test_the_right_call_id_in_another_session_is_refused_too() -> None:
    sim = _sim()
    to_a, other = _session_call(sim, "a"), _session_call(sim, "b")
    forged = structs.replace(response("a"), call_id=to_a.call_id, session_id=other.session_id)
    refused = _refused(
        sim.submit("a", forged, cause=to_a.id, as_is=True),
        ErrorCode.FORGED_HEADER,
        "answer_names_another_call",
    )
    assert "session id" in refused.message


def test_an_answer_after_hearing_from_a_callee_names_the_call_it_was_given() -> None:
    """a calls b, hears b's answer, then answers the router: its answer is caused by b's
    answer, and the call it answers is still the router's call of a, whose ids it must name."""
    sim = _sim()
    to_a = _session_call(sim, "a")
    to_b = call("b", goal="ask b")
    _ok(sim.submit("a", to_b, cause=to_a.id))
    from_b = structs.replace(response("b", target="a"), call_id=to_b.call_id)
    _ok(sim.submit("b", from_b, cause=to_b.id, as_is=True))
    naming_bs_call = structs.replace(response("a"), call_id=to_b.call_id)
    _refused(
        sim.submit("a", naming_bs_call, cause=from_b.id, as_is=True),
        ErrorCode.FORGED_HEADER,
        "answer_names_another_call",
    )
    final = structs.replace(response("a"), call_id=to_a.call_id, session_id=to_a.session_id)
    assert _ok(sim.submit("a", final, cause=from_b.id, as_is=True)).route.target == "router"


def test_delegation_and_sub_agent_answers_name_their_request_too() -> None:
    sim = _sim()
    to_a = _session_call(sim, "a")
    asked = delegation("a", "b", user_id="")
    _ok(sim.submit("a", asked, cause=to_a.id))
    _refused(
        sim.submit("b", delegation_done("b"), cause=asked.id, as_is=True),
        ErrorCode.FORGED_HEADER,
        "answer_names_another_call",
    )
    done = structs.replace(delegation_done("b"), request_id=asked.request_id)
    _ok(sim.submit("b", done, cause=asked.id, as_is=True))
    helper = sub_agent("a", "b", task="check it")
    _ok(sim.submit("a", helper, cause=to_a.id))
    _refused(
        sim.submit("b", sub_agent_done("b"), cause=helper.id, as_is=True),
        ErrorCode.FORGED_HEADER,
        "answer_names_another_call",
    )
    result = structs.replace(sub_agent_done("b"), call_id=helper.call_id)
    _ok(sim.submit("b", result, cause=helper.id, as_is=True))


def test_an_error_about_the_call_still_answers_it() -> None:
    """An error names its cause in `cause_id` (judged by `answers_call`), not a call id."""
    sim = _sim()
    to_a = _session_call(sim, "a")
    failed = Error(
        id=new_id(), created_at=utc_now(), code=ErrorCode.INTERNAL_ERROR, message="model down",
        cause_id=to_a.id,
    )  # fmt: skip
    assert _ok(sim.submit("a", failed, cause=to_a.id, as_is=True)).route.target == "router"


def test_a_call_recorded_before_the_gate_kept_its_names_is_not_checked() -> None:
    """A position written by an older gate has no names on its levels: its answer is judged
    as before (the check starts with the calls delivered after the upgrade)."""
    sim = _sim()
    to_a = _session_call(sim, "a")
    key = position_key(to_a.id)
    recorded = sim.ledger.get(key, Position)
    assert recorded is not None and recorded.levels[-1].answer_call_id == to_a.call_id
    old_level = structs.replace(recorded.levels[-1], answer_call_id="", answer_session_id="")
    sim.ledger.put(key, structs.replace(recorded, levels=(*recorded.levels[:-1], old_level)))
    _ok(sim.submit("a", response("a"), cause=to_a.id, as_is=True))


def test_an_agent_call_repeating_one_in_flight_is_a_cycle_until_the_first_is_answered() -> None:
    """Seed 003's same-objective check holds for an agent_call as for a delegation: a new id
    with the same caller, target and objective while the first is in flight is refused; the
    first's own redelivery is no repeat, and once it is answered the question may be asked
    again (a person asking twice after the first answer)."""
    sim = _sim()
    to_a = _session_call(sim, "a")
    first = call("b", goal="what is the weather")
    _ok(sim.submit("a", first, cause=to_a.id))
    sim.ledger.values.pop(position_key(first.id))  # decided, then a crash before its record
    _ok(sim.submit("a", first, cause=to_a.id))  # the same id again: the same call
    repeat = call("b", goal="what is the weather")
    refused = _refused(
        sim.submit("a", repeat, cause=to_a.id), ErrorCode.CYCLE_DETECTED, "objective_in_progress"
    )
    assert "a -> b with same objective already in progress" in refused.message
    _ok(sim.submit("a", call("b", goal="something else"), cause=to_a.id))
    answer = structs.replace(response("b", target="a"), call_id=first.call_id)
    _ok(sim.submit("b", answer, cause=first.id, as_is=True))
    _ok(sim.submit("a", call("b", goal="what is the weather"), cause=answer.id))


def test_a_collaborations_turns_with_one_goal_pass() -> None:
    """The router calls a, then b, then a again, every call with the session's goal: each
    turn's call follows the answer to the one before, so none repeats a call in flight."""
    sim = _sim()
    root = human()
    _ok(sim.submit("cli", root))
    session, cause = new_id(), root.id
    for turn, speaker in enumerate(("a", "b", "a", "b"), start=1):
        made = structs.replace(
            call(speaker, goal="plan the launch"), session_id=session, round=turn
        )
        _ok(sim.submit("router", made, cause=cause))
        answer = structs.replace(
            response(speaker), call_id=made.call_id, session_id=session, round=turn
        )
        _ok(sim.submit(speaker, answer, cause=made.id, as_is=True))
        cause = answer.id
