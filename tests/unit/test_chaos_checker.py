"""The chaos checker on hand-made histories: each broken promise is found, a clean run passes."""

from __future__ import annotations

import re

from tools.chaos._checker import (
    Applied,
    Fault,
    Published,
    SessionOutcome,
    check_history,
    format_report,
)

CALL = Published("call-1", 10, "gpt", "agent_call", at=1.0)
REPLY = Applied("gpt", "call-1", "reply-1", "agent_response", attempt=1, at=2.0)


def test_a_clean_history_passes() -> None:
    report = check_history(
        [CALL],
        [REPLY],
        [SessionOutcome("s1", "completed", "final")],
        stored_ids=["reply-1", "d-1"],
        faults=[Fault("SIGKILL", "gpt", 1.5)],
        end_to_end=[1.0, 2.0],
        audit_records=4,
        recovery_bound_s=5.0,
    )
    assert report.violations() == []
    assert report.lost == ()
    assert report.recovery_s == (0.5,)
    table = format_report(report, seed=7)
    assert re.search(r"^lost +0$", table, re.M)
    assert table.endswith("PASS")
    assert re.search(r"^seed +7$", table, re.M)


def test_an_acknowledged_message_nobody_applied_is_lost() -> None:
    other = Applied("claude", "call-1", "reply-x", "agent_response")  # the wrong handler
    report = check_history([CALL], [other])
    assert report.lost == ("call-1",)
    assert report.violations() == ["1 acknowledged message(s) never applied"]


def test_two_effects_with_one_purpose_are_a_duplicate() -> None:
    twin = Applied("gpt", "call-1", "reply-2", "agent_response", attempt=2)
    event = Applied("gpt", "call-1", "event-1", "step_completed")  # another purpose: fine
    report = check_history([CALL], [REPLY, twin, event])
    assert report.duplicate_effects == (("gpt", "call-1", "agent_response"),)
    assert report.lost == ()


def test_the_same_effect_twice_is_not_a_duplicate_effect() -> None:
    report = check_history([CALL], [REPLY, REPLY])
    assert report.duplicate_effects == ()


def test_an_id_stored_twice_escaped_de_duplication() -> None:
    report = check_history([], [], stored_ids=["a", "b", "a"])
    assert report.dedup_escapes == ("a",)
    assert report.violations() == ["1 id(s) stored more than once"]


def test_sessions_must_end_and_failures_must_say_why() -> None:
    report = check_history(
        [],
        [],
        [
            SessionOutcome("s1", "completed", "final"),
            SessionOutcome("s2", "failed", "AGENT_UNAVAILABLE"),
            SessionOutcome("s3"),
            SessionOutcome("s4", "failed", None),
        ],
    )
    assert report.incomplete == ("s3",)
    assert report.failed == {"AGENT_UNAVAILABLE": 1, "": 1}
    assert report.violations() == [
        "1 session(s) neither completed nor failed",
        "1 session(s) failed without a reason",
    ]


def test_audit_gaps_are_violations() -> None:
    report = check_history([], [], audit_records=3, audit_gaps=["seq 2: hash mismatch"])
    assert report.violations() == ["audit chain broken: 1 problem(s)"]


def test_recovery_is_the_time_to_the_next_end_to_end_message() -> None:
    faults = [Fault("SIGKILL", "router", 10.0), Fault("SIGSTOP", "gpt", 20.0)]
    report = check_history([], [], faults=faults, end_to_end=[9.0, 13.0, 21.5])
    assert report.recovery_s == (3.0, 1.5)
    assert report.worst_recovery_s == 3.0


def test_a_fault_never_recovered_from_breaks_the_bound() -> None:
    report = check_history(
        [],
        [],
        faults=[Fault("SIGKILL", "nats-server", 5.0)],
        end_to_end=[1.0],
        recovery_bound_s=7.0,
    )
    assert report.recovery_s == (None,)
    assert report.violations() == ["recovery took inf s (bound 7.0 s)"]
    assert "never" in format_report(report)


def test_slow_recovery_breaks_the_bound() -> None:
    report = check_history(
        [], [], faults=[Fault("SIGKILL", "gate", 0.0)], end_to_end=[9.0], recovery_bound_s=7.0
    )
    assert report.violations() == ["recovery took 9.0 s (bound 7.0 s)"]


def test_a_refusal_by_the_broker_is_a_violation() -> None:
    report = check_history([CALL], [REPLY], permission_violations={"gpt": 2, "router": 0})
    assert report.violations() == ["2 permission violation(s): gpt: 2"]
    table = format_report(report)
    assert re.search(r"^permission violations +2 \(gpt: 2\)$", table, re.M)
    assert "FAIL" in table


def test_a_locked_down_run_without_refusals_shows_zero_and_an_open_one_says_so() -> None:
    locked = format_report(check_history([CALL], [REPLY], permission_violations={"gpt": 0}))
    assert re.search(r"^permission violations +0$", locked, re.M)
    assert locked.endswith("PASS")
    assert re.search(
        r"^permission violations +open broker$", format_report(check_history([], [])), re.M
    )


def test_the_table_counts_completed_sessions_by_reason() -> None:
    outcomes = [
        SessionOutcome("s1", "completed", "final"),
        SessionOutcome("s2", "completed", "final"),
        SessionOutcome("s3", "completed", "cap_reached"),
    ]
    report = check_history([], [], outcomes)
    assert report.completed_by == {"final": 2, "cap_reached": 1}
    assert re.search(r"^  completed +3 \(cap_reached: 1, final: 2\)$", format_report(report), re.M)
