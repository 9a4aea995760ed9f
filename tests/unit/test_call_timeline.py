"""Calls between agents told on the timeline of the person a trace works for (issue 15, item 5):
which session the gate tells them in, what the event says, and seed 004's lines for it."""

from __future__ import annotations

from msgspec import structs

from actors.auditor._facts import FactSource, Redactor, records_for
from actors.gate._decide import Allow
from actors.gate._plan import Deny
from actors.gate._timeline import call_event
from schemas import Decision, ErrorCode, HumanMessage, SessionEvent, new_id, utc_now
from tests.support.gatesim import GateSim, bundle, call, delegation, delegation_done
from tools.collab import render

PEOPLE = {"start_traces": True, "speaks_for_person": True, "allowed_targets": ("router",)}
ROUTER = {"start_traces": True, "allowed_targets": ("planner",)}
PLANNER = {"allowed_targets": ("coder",), "max_depth": 3}


def _sim() -> GateSim:
    return GateSim(bundle(alice=PEOPLE, router=ROUTER, planner=PLANNER, coder={}))


def _admitted(outcome: Allow | Deny) -> Allow:
    assert isinstance(outcome, Allow), outcome
    return outcome


def _planner_working_for_alice(sim: GateSim, session: str) -> str:
    """alice says something in `session`; the router calls the planner: that call's id."""
    said = HumanMessage(
        id=new_id(), created_at=utc_now(), text="assess it", call_id=new_id(), session_id=session
    )
    _admitted(sim.submit("alice", said))
    to_planner = call("planner")
    _admitted(sim.submit("router", to_planner, cause=said.id))
    return to_planner.id


def test_every_envelope_of_a_trace_is_in_the_session_its_root_was_sent_in() -> None:
    sim = _sim()
    cause = _planner_working_for_alice(sim, "s-alice")
    # The planner names another session as its parent: a claim the gate does not take.
    asked = structs.replace(delegation("planner", "coder", user_id=""), parent_session_id="s-bob")
    admitted = _admitted(sim.submit("planner", asked, cause=cause))
    assert admitted.route.position.session_id == "s-alice"
    assert admitted.route.position.origin == "alice"
    answered = _admitted(sim.submit("coder", delegation_done("coder"), cause=asked.id))
    assert answered.route.position.session_id == "s-alice"


def _decision(kind: str, **fields: object) -> Decision:
    base: dict[str, object] = {
        "id": "dec-1",
        "created_at": utc_now(),
        "allowed": True,
        "sender": "planner",
        "target": "coder",
        "envelope_id": "call-1",
        "envelope_kind": kind,
        "causation_id": "cause-1",
        "trace_id": "t",
        "origin": "alice",
        "objective": "Write the fix",
    }
    return Decision(**{**base, **fields})  # type: ignore[arg-type]


def _lines(event: SessionEvent | None) -> list[str]:
    assert event is not None
    line = render(event, 1)
    assert line is not None
    return line.splitlines()


def test_a_call_made_is_told_as_seed_004_says_it() -> None:
    event = call_event(_decision("delegation_request"), "s1")
    assert event is not None and event.event_type == "tool_requested"
    assert event.session_id == "s1" and event.payload["call_id"] == "call-1"
    assert _lines(event) == ["planner calling coder with task: Write the fix"]


def test_a_refused_call_is_told_with_the_gate_s_reason() -> None:
    refused = _decision(
        "sub_agent_call", allowed=False, code=ErrorCode.TARGET_NOT_ALLOWED, message="not allowed"
    )
    assert _lines(call_event(refused, "s1")) == [
        "planner calling coder with task: Write the fix",
        "coder returned: REFUSED (TARGET_NOT_ALLOWED: not allowed)",
    ]


def test_an_answer_is_told_with_its_figures_and_the_tools_it_used() -> None:
    answer = _decision(
        "sub_agent_result",
        sender="coder",
        target="planner",
        envelope_id="answer-1",
        causation_id="call-1",
        outcome="success",
        tokens=812,
        duration_ms=2000,
        tools_used=("read", "grep"),
    )
    event = call_event(answer, "s1")
    assert event is not None and event.event_type == "tool_completed"
    assert event.payload["call_id"] == "call-1"
    assert _lines(event) == ["coder returned: SUCCESS (812 tokens, 2s)", "  Tools used: read, grep"]


def test_a_failed_answer_gives_its_reason() -> None:
    answer = _decision(
        "delegation_response", sender="coder", outcome="failed", reason="no parser", tokens=5
    )
    assert _lines(call_event(answer, "s1")) == ["coder returned: FAILED (5 tokens; no parser)"]


def test_only_calls_and_their_answers_in_a_session_are_told() -> None:
    for kind in ("agent_call", "agent_response", "human_message", "control"):
        assert call_event(_decision(kind), "s1") is None, kind
    assert call_event(_decision("delegation_request"), "") is None
    assert call_event(_decision("sub_agent_result", sender="coder"), "") is None


def test_every_event_of_one_decision_has_the_same_id() -> None:
    """A decision published again after a crash tells the same event: JetStream drops it."""
    first = call_event(_decision("delegation_request"), "s1")
    again = call_event(_decision("delegation_request"), "s1")
    assert first is not None and again is not None and first.id == again.id


def test_a_refused_answer_is_told_as_refused() -> None:
    refused = _decision(
        "delegation_response",
        sender="coder",
        allowed=False,
        code=ErrorCode.DUPLICATE_ENVELOPE,
        message="already answered",
    )
    assert _lines(call_event(refused, "s1")) == [
        "coder returned: REFUSED (DUPLICATE_ENVELOPE: already answered)"
    ]


def test_the_auditor_records_the_decision_and_not_its_copy_on_the_timeline() -> None:
    told = call_event(_decision("delegation_request"), "s1")
    assert told is not None
    source = FactSource("PARLEY_EVENTS", 3, "t", 1, "call-1", "alice", told.created_at)
    assert records_for(told, source, tenant="demo", redactor=Redactor(key=b"k")) == []
    said = SessionEvent(
        id="e2", created_at=told.created_at, session_id="s1", event_type="session_started"
    )
    assert len(records_for(said, source, tenant="demo", redactor=Redactor(key=b"k"))) == 1
