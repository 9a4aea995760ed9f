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


def _sessions_started_at(*times: float) -> list[SessionOutcome]:
    return [
        SessionOutcome(f"s{n}", "completed", "final", started_at=t, ended_at=t + 1)
        for n, t in enumerate(times)
    ]


FAULTS = [Fault("kill", "gate", 20.0), Fault("kill", "router", 30.0), Fault("pause", "gpt", 40.0)]


def test_a_run_whose_load_stopped_fails_even_when_every_session_it_ran_passed() -> None:
    """Issue 30: the load stopped 15 s into a 60 s run (its sessions refused RATE_LIMITED),
    and the later faults hit an idle system: every window from the first fault on saw no
    session start, which fails the verdict although every session that ran completed."""
    report = check_history(
        [],
        [],
        _sessions_started_at(*range(0, 15)),
        faults=FAULTS,
        load_span=(0.0, 60.0),
        refusals={"RATE_LIMITED": 45},
    )
    assert report.incomplete == () and report.completed == 15
    assert report.violations() == [
        "3 of 3 fault window(s) with no session started or open "
        "(20.0-30.0 s, 30.0-40.0 s, 40.0-60.0 s): the load stopped"
    ]
    table = format_report(report)
    assert re.search(r"^fault windows with sessions at work +0 of 3$", table, re.M)
    assert re.search(
        r"^refused \(error answers to the load\) +45 \(RATE_LIMITED: 45\)$", table, re.M
    )
    assert "FAIL" in table.splitlines()[-1]


def test_a_load_that_stops_after_the_last_fault_fails_too() -> None:
    """Sessions in every window between faults, none after the last one."""
    report = check_history(
        [], [], _sessions_started_at(1, 21, 31), faults=FAULTS, load_span=(0.0, 60.0)
    )
    assert report.load is not None and report.load.idle == ((40.0, 60.0),)
    assert len(report.violations()) == 1


def test_a_load_held_through_every_fault_passes_and_shows_its_windows() -> None:
    report = check_history(
        [],
        [],
        _sessions_started_at(*range(0, 60, 3)),
        faults=FAULTS,
        load_span=(0.0, 60.0),
        refusals={"DUPLICATE_ENVELOPE": 1},
    )
    assert report.violations() == []
    table = format_report(report)
    assert re.search(r"^fault windows with sessions at work +3 of 3$", table, re.M)
    assert re.search(
        r"^refused \(error answers to the load\) +1 \(DUPLICATE_ENVELOPE: 1\)$", table, re.M
    )
    assert table.endswith("PASS")


def test_sessions_still_open_through_a_window_are_load_at_work() -> None:
    """A fault that slows every session (a cluster electing a submit leader) keeps each
    worker on one long session: none starts for seconds after it, and the load has not
    stopped (issue 30's check failed the cluster run that way). A session still open in the
    window counts; one that ended before it does not."""
    long = [
        SessionOutcome("long", "completed", "final", started_at=18.0, ended_at=45.0),
        *_sessions_started_at(1, 21, 31),
    ]
    assert check_history([], [], long, faults=FAULTS, load_span=(0.0, 60.0)).violations() == []
    ended = [
        SessionOutcome("early", "completed", "final", started_at=18.0, ended_at=39.0),
        *_sessions_started_at(1, 21, 31),
    ]
    report = check_history([], [], ended, faults=FAULTS, load_span=(0.0, 60.0))
    assert report.load is not None and report.load.idle == ((40.0, 60.0),)


def test_a_run_without_faults_still_needs_a_session_started() -> None:
    report = check_history([], [], [], load_span=(0.0, 60.0))
    assert report.violations() == [
        "1 of 1 fault window(s) with no session started or open (0.0-60.0 s): the load stopped"
    ]


def test_a_window_shorter_than_the_recovery_bound_is_judged_with_the_next() -> None:
    """A fault healed while the next came a second later: the sessions were rightly still
    waiting in between, so the short window is judged together with the next one; the last
    window, short too, joins the one before it."""
    faults = [Fault("kill", "gpt", 10.0), Fault("kill", "gate", 11.0), Fault("kill", "gpt", 55.0)]
    report = check_history(
        [],
        [],
        _sessions_started_at(14.0, 30.0),
        faults=faults,
        load_span=(0.0, 58.0),
        recovery_bound_s=7.0,
        end_to_end=[14.0, 30.0, 56.0],
    )
    assert report.load is not None
    assert report.load.windows == ((10.0, 58.0),)
    assert report.violations() == []
    strict = check_history(
        [], [], _sessions_started_at(14.0, 30.0), faults=faults, load_span=(0.0, 58.0)
    )
    assert strict.load is not None and strict.load.idle == ((10.0, 11.0), (55.0, 58.0))


def test_a_lone_window_shorter_than_the_bound_is_stretched_past_the_end_of_the_load() -> None:
    """One fault healed 3.5 s before the load's end: a session submitted before the end that
    started once the system moved again, 5 s after the fault, counts for its window."""
    faults = [Fault("kill", "router", 4.5)]
    report = check_history(
        [],
        [],
        _sessions_started_at(1.0, 9.5),
        faults=faults,
        load_span=(0.0, 8.0),
        recovery_bound_s=7.0,
        end_to_end=[9.5],
    )
    assert report.load is not None and report.load.windows == ((4.5, 11.5),)
    assert report.violations() == []
    late = check_history(
        [],
        [],
        _sessions_started_at(1.0, 12.0),
        faults=faults,
        load_span=(0.0, 8.0),
        recovery_bound_s=7.0,
        end_to_end=[9.5],
    )
    assert late.load is not None and late.load.idle == ((4.5, 11.5),)
