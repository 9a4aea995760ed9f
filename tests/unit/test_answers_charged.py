"""Issue 21, item 1, on the gate's pure core: an answer is charged with its call, once.

The call passed the rate and concurrency limits; its answer only closes the slot it opened,
so no rate refuses it, and a second answer to the same call is refused as a duplicate.
"""

from __future__ import annotations

from msgspec import structs

from actors.gate._decide import ANSWER_GRACE_MS, Allow
from actors.gate._plan import Deny
from actors.gate._records import TraceState, rate_key, trace_key
from schemas import Error, ErrorCode, new_id, utc_now
from tests.support.gatesim import GateSim, bundle, call, human, response

PROFILES = {
    "cli": {
        "start_traces": True,
        "speaks_for_person": True,
        "allowed_targets": ("router",),
        "rate_per_minute": 600,
    },
    "router": {"allowed_targets": ("claude",), "start_traces": True, "rate_per_minute": 600},
    "claude": {"allowed_targets": ("router",), "rate_per_minute": 1},
}


def _called(sim: GateSim) -> str:
    """The router calls claude in a person's trace: the call's id."""
    root = human()
    assert isinstance(sim.submit("cli", root), Allow)
    to_claude = call("claude")
    assert isinstance(sim.submit("router", to_claude, cause=root.id), Allow)
    return to_claude.id


def test_answers_pass_whatever_the_pairs_rate_and_spend_none_of_it() -> None:
    sim = GateSim(bundle(**PROFILES))
    for _ in range(5):  # claude may send 1 message a minute to the router
        assert isinstance(sim.submit("claude", response("claude"), cause=_called(sim)), Allow)
    assert sim.ledger.values.get(rate_key("claude", "router")) is None


def test_a_second_answer_to_one_call_is_a_duplicate() -> None:
    sim = GateSim(bundle(**PROFILES))
    cid = _called(sim)
    assert isinstance(sim.submit("claude", response("claude"), cause=cid), Allow)
    second = sim.submit("claude", response("claude", "again"), cause=cid)
    assert isinstance(second, Deny)
    assert (second.code, second.rule) == (ErrorCode.DUPLICATE_ENVELOPE, "duplicate_answer")
    # Nor may an error answer it afterwards.
    late = Error(
        id=new_id(), created_at=utc_now(), code=ErrorCode.INTERNAL_ERROR, message="x", cause_id=cid
    )
    assert isinstance(sim.submit("claude", late, cause=cid), Deny)


def test_a_slow_answer_past_its_deadline_still_reaches_its_caller() -> None:
    sim = GateSim(bundle(**PROFILES))
    cid = _called(sim)
    sim.now_ms += 15_000 + ANSWER_GRACE_MS - 1  # the call's deadline (15 s) and most of the grace
    assert isinstance(sim.submit("claude", response("claude"), cause=cid), Allow)


def test_an_error_about_another_envelope_is_no_answer() -> None:
    """It pays the rate like any message and leaves the call open to its real answer."""
    sim = GateSim(bundle(**PROFILES))
    cid = _called(sim)
    stray = Error(
        id=new_id(), created_at=utc_now(), code=ErrorCode.INTERNAL_ERROR, message="x", cause_id="y"
    )
    assert isinstance(sim.submit("claude", stray, cause=cid), Allow)
    again = structs.replace(stray, id=new_id())
    refused = sim.submit("claude", again, cause=cid)
    assert isinstance(refused, Deny) and refused.rule == "rate_per_minute"
    assert isinstance(sim.submit("claude", response("claude"), cause=cid), Allow)


def test_the_answer_that_closed_its_call_is_admitted_again_and_charged_once() -> None:
    """A server restart loses a consumer's delivery counts: an answer the gate admitted and
    committed, but never delivered or acked, comes back as a first delivery. The call's own
    record of which answer closed it lets it through (charging nothing twice); another
    answer is still a second one."""
    sim = GateSim(bundle(**PROFILES))
    cid = _called(sim)
    answer = response("claude", tokens=7)
    assert isinstance(sim.submit("claude", answer, cause=cid), Allow)
    trace_k = trace_key(sim.position(cid).trace_id)
    charged = sim.ledger.get(trace_k, TraceState)
    assert charged is not None
    assert isinstance(sim.submit("claude", answer, cause=cid), Allow)
    assert sim.ledger.get(trace_k, TraceState) == charged
    other = sim.submit("claude", response("claude", "again"), cause=cid)
    assert isinstance(other, Deny) and other.rule == "duplicate_answer"


def test_an_answered_call_no_longer_holds_its_objective() -> None:
    """A closed call stays in its trace's record (to recognise its answer), but no longer
    counts as an objective in progress: the same objective may be asked again."""
    sim = GateSim(bundle(**PROFILES))
    root = human()
    assert isinstance(sim.submit("cli", root), Allow)
    first = call("claude", goal="summarise")
    assert isinstance(sim.submit("router", first, cause=root.id), Allow)
    in_progress = sim.submit("router", call("claude", goal="summarise"), cause=root.id)
    assert isinstance(in_progress, Deny) and in_progress.rule == "objective_in_progress"
    assert isinstance(sim.submit("claude", response("claude"), cause=first.id), Allow)
    assert isinstance(sim.submit("router", call("claude", goal="summarise"), cause=root.id), Allow)
