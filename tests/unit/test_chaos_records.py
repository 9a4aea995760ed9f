"""Reading checker facts from stored decisions and session events, without a bus."""

from __future__ import annotations

from datetime import timedelta

from schemas import TOLD_FROM_DECISION, Decision, ErrorCode, SessionEvent, utc_now
from tools.chaos._checker import Fault, Published, check_history
from tools.chaos._reads import Stored
from tools.chaos._records import history_from

T0 = utc_now()


def _decision(envelope_id: str, sender: str, target: str, kind: str, cause: str = "") -> Decision:
    return Decision(
        id=f"d-{envelope_id}",
        created_at=T0,
        allowed=True,
        sender=sender,
        target=target,
        envelope_id=envelope_id,
        envelope_kind=kind,
        causation_id=cause,
        trace_id="t",
    )


def _event(
    event_id: str, event_type: str, inputs: tuple[str, ...], **extra: object
) -> SessionEvent:
    return SessionEvent(
        id=event_id,
        created_at=T0,
        session_id="s1",
        event_type=event_type,  # type: ignore[arg-type]  # a literal of EventType
        envelope_ids=inputs,
        **extra,  # type: ignore[arg-type]
    )


def _session() -> list[Stored]:
    records: list[Decision | SessionEvent] = [
        _decision("hm", "cli", "router", "human_message"),
        _event("e1", "session_created", ("hm",)),
        _decision("call", "router", "claude", "agent_call", cause="hm"),
        _decision("resp", "claude", "router", "agent_response", cause="call"),
        _event("e2", "step_completed", ("resp",)),
        _event("e3", "session_completed", ("resp",), stop_reason="final"),
    ]
    return [Stored(seq, "subject", envelope) for seq, envelope in enumerate(records, 1)]


def test_a_whole_session_is_applied_end_to_end() -> None:
    roots = [Published("hm", 1, "gate", "human_message")]
    history = history_from(_session(), roots, answering=("claude",))
    receivers = {(p.receiver, p.envelope_id) for p in history.published}
    assert receivers == {("gate", "hm"), ("router", "hm"), ("claude", "call"), ("router", "resp")}
    report = check_history(
        history.published, history.applied, history.sessions, stored_ids=history.stored_ids
    )
    assert report.violations() == []
    assert report.completed == 1


def test_a_call_the_agent_never_answered_is_lost() -> None:
    records = [r for r in _session() if r.envelope is None or r.envelope.id not in {"d-resp"}]
    history = history_from(records, answering=("claude",))
    report = check_history(history.published, history.applied)
    assert report.lost == ("call",)


def test_two_answers_to_one_call_are_a_duplicate_effect() -> None:
    extra = Stored(9, "subject", _decision("resp2", "claude", "router", "agent_response", "call"))
    history = history_from([*_session(), extra], answering=("claude",))
    report = check_history(history.published, history.applied)
    assert report.duplicate_effects == (("claude", "call", "agent_response"),)


def test_a_second_decision_on_one_envelope_escaped_de_duplication() -> None:
    again = Stored(9, "subject", _decision("call", "router", "claude", "agent_call", cause="hm"))
    history = history_from([*_session(), again], answering=("claude",))
    report = check_history([], [], stored_ids=history.stored_ids)
    assert report.dedup_escapes == ("decision-on:call",)


def test_a_forged_cause_is_not_an_effect_of_that_cause() -> None:
    forged = Decision(
        id="d-x",
        created_at=T0,
        allowed=False,
        code=ErrorCode.FORGED_HEADER,
        sender="cli",
        envelope_id="x",
        envelope_kind="human_message",
        causation_id="call",
        trace_id="t",
    )
    history = history_from([*_session(), Stored(9, "subject", forged)], answering=("claude",))
    assert not [a for a in history.applied if a.handler == "cli" and a.envelope_id == "call"]


def test_a_failed_session_keeps_its_reason_and_code() -> None:
    failed = _event(
        "e9", "session_failed", ("err",), stop_reason="error", payload={"code": "AGENT_UNAVAILABLE"}
    )
    history = history_from([Stored(1, "subject", failed)])
    assert [(s.ended, s.reason) for s in history.sessions] == [
        ("failed", "error: AGENT_UNAVAILABLE")
    ]


def test_an_undecodable_record_is_counted() -> None:
    history = history_from([Stored(1, "subject", None)])
    assert history.undecodable == 1


def test_progress_is_when_a_transition_was_stored_not_when_it_was_built() -> None:
    """A router that built an event just before an outage stores it once the broker is back:
    the recovery after that fault ends at the store, not never."""
    built = T0.timestamp()
    stored_late = Stored(1, "subject", _event("e1", "session_completed", ("r",)), {}, built + 5)
    unknown = Stored(2, "subject", _event("e2", "step_completed", ("q",)))
    history = history_from([stored_late, unknown])
    assert history.end_to_end == [built + 5, built]
    healed = Fault("kill", "nats-server", built + 1)
    report = check_history([], [], faults=[healed], end_to_end=history.end_to_end)
    assert report.recovery_s == (4.0,)


def test_a_session_is_judged_by_the_bound_its_last_step_stated() -> None:
    """`ends_by` on a step is the latest the session promised to end by; a session that ends
    later, or never, breaks that promise, and the longest session is reported."""
    opened = T0.timestamp()
    bound = (T0 + timedelta(seconds=30)).isoformat()
    step = _event("e1", "step_started", (), payload={"ends_by": bound})
    on_time = _event("e2", "session_completed", ("r",), stop_reason="final")
    created = _event("e0", "session_created", ("hm",))
    history = history_from(
        [Stored(1, "s", created), Stored(2, "s", step), Stored(3, "s", on_time, {}, opened + 12)]
    )
    report = check_history([], [], history.sessions)
    assert report.violations() == [] and report.late == ()
    assert report.longest_session_s == 12
    late = [Stored(1, "s", step), Stored(2, "s", on_time, {}, opened + 40)]
    report = check_history([], [], history_from(late).sessions)
    assert report.late == ("s1",) and "ended past their stated bound" in report.violations()[0]
    report = check_history([], [], history_from([Stored(1, "s", step)]).sessions)
    assert report.late == ("s1",)  # never ended, though its bound has passed


def test_a_call_told_to_a_person_is_no_session_of_its_own() -> None:
    """The gate tells a person's timeline of the calls made for them, under the session the
    trace started in (a delegating person's own id): no session opens or hangs for it."""
    told = _event("e7", "tool_requested", (), payload={TOLD_FROM_DECISION: "d-x", "call_id": "x"})
    history = history_from([Stored(1, "subject", told)])
    assert history.sessions == []
    assert history.stored_ids == ["event:e7"]
