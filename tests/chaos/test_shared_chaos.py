"""`parley chaos --shared` (issue 16): orchestrated sessions across two deployments while the
relays, Alice's local agent host and the gateway are SIGKILLed, and the checker that judges
the run.

The checker is pure, so its promises are tested first on hand-made histories: a turn Bob's
gate admitted twice, a call no session sent, an answer that never reached Alice's session, a
session left waiting, a failure without a reason, a broken audit chain each fail the run; an
answer to a session that ended in error with a reason does not, and a run whose load stopped
fails. Then the command runs as a real process, 30 s: three nats-servers, both deployments'
actors, five faults (the gateway, both relays, the local agent host, the router), and its
verdict must be PASS with its load held to the end.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from schemas import SessionEvent, derive_id
from tests.support.system import finished, parley_cli
from tools.chaos._checker import Fault, SessionOutcome
from tools.chaos._reads import Stored
from tools.chaos._shared_check import (
    AuditCheck,
    Send,
    SharedHistory,
    check_shared,
    format_shared_report,
)
from tools.chaos._shared_records import sessions_from

pytestmark = pytest.mark.chaos

VERIFIED = (AuditCheck("alice", 10), AuditCheck("bob", 4))


def _history(**changes: object) -> SharedHistory:
    """One session of two turns, each sent once, admitted once by Bob, answered, and the
    answer applied by Alice's session; both chains verified."""
    base: dict[str, object] = {
        "sessions": [SessionOutcome("s1", ended="completed", reason="max_turns")],
        "sends": [Send("s1", 1, "a1", "b1"), Send("s1", 2, "a2", "b2")],
        "bob_calls": ["b1", "b2", "b2"],  # a decision stored twice on one id is one call
        "bob_answers": [("r1", "b1"), ("r2", "b2")],
        "alice_answers": {"a1": frozenset({"x1"}), "a2": frozenset({"x2"})},
        "consumed": frozenset({"x1", "x2"}),
        "audits": VERIFIED,
    }
    return SharedHistory(**{**base, **changes})  # type: ignore[arg-type]


def test_a_clean_history_passes() -> None:
    report = check_shared(_history())
    assert report.violations() == []
    assert (report.bob_calls, report.answers_reached) == (2, 2)
    assert format_shared_report(report, seed=7).splitlines()[-1].endswith("PASS")


def test_a_turn_bob_admitted_twice_is_a_duplicate_send() -> None:
    """A retry of turn 2 under a new envelope that also reached Bob: two sends of one turn."""
    sends = [Send("s1", 1, "a1", "b1"), Send("s1", 2, "a2", "b2"), Send("s1", 2, "a3", "b3")]
    report = check_shared(_history(sends=sends, bob_calls=["b1", "b2", "b3"]))
    assert report.duplicate_sends == (("s1", 2),)
    assert "1 turn(s) sent to the shared agent twice" in report.violations()
    table = format_shared_report(report)
    assert "verdict" in table and table.endswith("  sent twice (session, turn): s1 2")


def test_a_call_no_session_sent_fails_the_run() -> None:
    report = check_shared(_history(bob_calls=["b1", "b2", "b9"]))
    assert report.unattributed_calls == ("b9",)
    assert report.violations() == ["1 call(s) Bob admitted no session sent"]


def test_an_answer_that_never_reached_alices_session_is_lost() -> None:
    """Bob admitted the answer to turn 2; Alice's gate admitted it, but no session event
    applied it, and the session completed: lost."""
    report = check_shared(_history(consumed=frozenset({"x1"})))
    assert report.lost_answers == ("r2",)
    assert report.violations() == ["1 answer(s) Bob admitted never reached Alice"]


def test_an_answer_to_a_session_ended_in_error_with_a_reason_is_not_lost() -> None:
    ended = [SessionOutcome("s1", ended="failed", reason="remote_failed")]
    report = check_shared(_history(sessions=ended, consumed=frozenset({"x1"})))
    assert report.lost_answers == () and report.answers_to_ended_sessions == 1
    assert report.violations() == []


def test_a_session_left_waiting_or_failed_without_a_reason_fails_the_run() -> None:
    sessions = [SessionOutcome("s1", ended="failed", reason=""), SessionOutcome("s2")]
    report = check_shared(_history(sessions=sessions))
    assert report.violations() == [
        "1 session(s) neither completed nor in error",
        "1 session(s) in error without a reason",
    ]
    assert report.incomplete == ("s2",)


def test_a_broken_or_unread_audit_chain_fails_the_run() -> None:
    audits = (AuditCheck("alice", 10, ("seq 4: hash mismatch",)), AuditCheck("bob", None))
    violations = check_shared(_history(audits=audits)).violations()
    assert violations == [
        "alice's audit chain broken: 1 problem(s)",
        "bob's audit chain could not be read",
    ]


def test_a_run_without_sessions_proves_nothing() -> None:
    report = check_shared(_history(sessions=[], sends=[], bob_calls=[], bob_answers=[]))
    assert report.violations() == ["no session ran"]


def test_recovery_is_reported_from_each_fault_to_the_next_session_event() -> None:
    report = check_shared(_history(faults=[Fault("kill", "gateway", 10.0)], progress=[9, 12.5]))
    assert report.recovery_s == (2.5,) and report.violations() == []


def test_a_run_whose_load_stopped_fails_and_shows_what_the_load_was_refused() -> None:
    """Issue 30: the person's opening messages were refused RATE_LIMITED from 20 s on; the
    faults after it hit an idle system. Every session that ran passed, the run fails."""
    sessions = [
        SessionOutcome(
            f"s{n}",
            ended="completed",
            reason="max_turns",
            started_at=float(n),
            ended_at=float(n) + 1,
        )
        for n in range(20)
    ]
    faults = [Fault("kill", "gateway", 10.0), Fault("kill", "bob/relay", 25.0)]
    history = _history(
        sessions=sessions,
        faults=faults,
        load_span=(0.0, 60.0),
        refusals={"RATE_LIMITED": 12},
        min_window_s=7.0,
    )
    report = check_shared(history)
    assert report.violations() == [
        "1 of 2 fault window(s) with no session started or open (25.0-60.0 s): the load stopped"
    ]
    table = format_shared_report(report)
    assert re.search(r"^fault windows with sessions at work +1 of 2$", table, re.M), table
    assert re.search(
        r"^refused \(error answers to the load\) +12 \(RATE_LIMITED: 12\)$", table, re.M
    )
    held = [SessionOutcome("s", ended="completed", reason="max_turns", started_at=50.0)]
    assert (
        check_shared(
            _history(sessions=[*sessions, *held], faults=faults, load_span=(0.0, 60.0))
        ).violations()
        == []
    )


def _event(session: str, kind: str, turn: int, ids: tuple[str, ...], **payload: object) -> Stored:
    event = SessionEvent(
        id=derive_id(f"{session}{kind}{turn}", "t"),
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        session_id=session,
        event_type=kind,  # type: ignore[arg-type]
        round=turn,
        envelope_ids=ids,
        stop_reason=str(payload.pop("stop_reason", "")) or None,
        payload=dict(payload),
    )
    return Stored(seq=0, subject="", envelope=event, headers={}, stored_at=100.0 + turn)


def test_the_timeline_names_the_id_bobs_relay_gives_each_turn_and_each_end() -> None:
    """Alice's outbound step names her call; Bob's relay submits it under the id derived from
    Alice's device and that call. A failure's stop reason counts only with a reason told."""
    records = [
        _event("s1", "session_started", 1, ()),
        _event("s1", "step_started", 1, ("a1",), role="outbound"),
        _event("s1", "step_completed", 1, ("x1",), role="remote_agent"),
        _event("s1", "session_failed", 1, ("e1",), stop_reason="remote_failed", reason="gone"),
        _event("s2", "session_started", 1, ()),
        _event("s2", "session_failed", 1, (), stop_reason="remote_failed"),
        _event("s3", "session_started", 1, ()),
    ]
    timeline = sessions_from(records, "dev")
    assert timeline.sends == [Send("s1", 1, "a1", derive_id("dev:a1", "relay-call"))]
    assert {"a1", "x1", "e1"} <= timeline.consumed
    outcomes = {o.session_id: (o.ended, o.reason) for o in timeline.sessions}
    assert outcomes == {
        "s1": ("failed", "remote_failed"),
        "s2": ("failed", ""),
        "s3": (None, None),
    }
    assert timeline.told == {"remote_failed": "gone"}


async def test_the_plan_kills_each_of_issue_16s_targets_and_other_modes_flags_are_refused() -> None:
    """`--plan` prints the seed's schedule: every fault a SIGKILL, each target hit before any
    is hit again; a flag of the single-deployment mode is refused, not silently ignored."""
    argv = ("--shared", "--plan", "--seed", "1", "--duration", "60")
    code, lines = await finished(parley_cli(dict(os.environ), "chaos", *argv))
    assert code == 0, lines
    targets = [line.split()[3] for line in lines]
    assert {line.split()[2] for line in lines} == {"kill"}
    assert set(targets[:5]) == {
        "alice/relay",
        "bob/relay",
        "alice/local",
        "alice/router",
        "gateway",
    }
    refused = ("--shared", "--cluster", "3", "--delegations", "2")
    code, lines = await finished(parley_cli(dict(os.environ), "chaos", *refused))
    assert code == 2 and "not with --cluster, --delegations" in "\n".join(lines), lines


async def test_parley_chaos_shared_passes_with_both_relays_the_gateway_and_the_local_agent_killed(
    tmp_path: Path,
) -> None:
    """Seed 23's 30 s schedule: the gateway, Alice's relay, Bob's relay, Alice's local agent
    host, each SIGKILLed and started again; the verdict is PASS, every fault was injected,
    and the load held to the end: a session started in every fault window, nothing refused.
    (Issue 30: at the person's default 60 messages a minute the load was refused RATE_LIMITED
    from about 20 s on; a 30 s run shows it, the 60 s run is measured by hand, docs/chaos.md.)"""
    argv = ("--shared", "--seed", "23", "--duration", "30", "--keep", str(tmp_path / "run"))
    code, lines = await finished(parley_cli(dict(os.environ), "chaos", *argv), timeout=120)
    output = "\n".join(lines)
    assert code == 0, output
    assert re.search(r"^verdict\s+PASS$", output, re.M), output
    faults = re.search(r"^faults injected \(SIGKILL\)\s+(\d+) \((.*)\)$", output, re.M)
    assert faults is not None, output
    for target in ("alice/local", "alice/relay", "bob/relay", "gateway"):
        assert f"{target}: " in faults.group(2), output
    windows = re.search(r"^fault windows with sessions at work\s+(\d+) of (\d+)$", output, re.M)
    assert windows is not None and windows.group(1) == windows.group(2), output
    assert re.search(r"^refused \(error answers to the load\)\s+0$", output, re.M), output
    sessions = re.search(r"^sessions\s+(\d+)$", output, re.M)
    assert sessions is not None and int(sessions.group(1)) >= 2, output
