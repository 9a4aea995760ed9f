"""The chaos checker on hand-made delegation histories: a person delegates to gpt, which fans
out to claude and the reviewer, then chains one more request to claude, and answers.

A fan-out's requests and a chain's rounds are different effects of one call; a request sent
again under its id is the same one; a delegation nobody answered is a broken promise.
"""

from __future__ import annotations

import io
import re
from datetime import timedelta

from actors.agent._delegating import Delegator
from schemas import Decision, ErrorCode, derive_id, utc_now
from tools.chaos._checker import ChaosReport, Published, check_history, format_report
from tools.chaos._reads import Stored, print_unanswered
from tools.chaos._records import History, history_from

T0 = utc_now()
AGENTS = ("gpt", "claude", "reviewer")
ASK = "ask"
"""The person's delegation to gpt."""
FAN_OUT = Delegator.request_ids(ASK, 0, 2)
"""gpt's first round: claude and the reviewer at once."""
(CHAIN,) = Delegator.request_ids(ASK, 1, 1)
"""gpt's second round: claude again, handed the first round's results."""


def _decision(
    envelope_id: str,
    sender: str,
    target: str,
    kind: str,
    cause: str = "",
    *,
    after_s: float = 0.0,
    **verdict: object,
) -> Decision:
    return Decision(
        id=str(verdict.pop("decision_id", f"d-{envelope_id}")),
        created_at=T0,
        decided_at=T0 + timedelta(seconds=after_s),
        allowed=bool(verdict.pop("allowed", True)),
        sender=sender,
        target=target,
        envelope_id=envelope_id,
        envelope_kind=kind,
        causation_id=cause,
        trace_id=ASK,
        **verdict,  # type: ignore[arg-type]  # code and rule of a refusal
    )


def _delegation(*, answered: bool = True) -> list[Decision]:
    decisions = [
        _decision(ASK, "cli", "gpt", "delegation_request"),
        _decision(FAN_OUT[0], "gpt", "claude", "delegation_request", ASK),
        _decision(FAN_OUT[1], "gpt", "reviewer", "delegation_request", ASK),
        _decision("r1", "claude", "gpt", "delegation_response", FAN_OUT[0]),
        _decision("r2", "reviewer", "gpt", "delegation_response", FAN_OUT[1]),
        _decision(CHAIN, "gpt", "claude", "delegation_request", ASK),
        _decision("r3", "claude", "gpt", "delegation_response", CHAIN),
    ]
    if answered:
        decisions.append(_decision("done", "gpt", "cli", "delegation_response", ASK, after_s=2))
    return decisions


def _history(decisions: list[Decision], bound_s: float | None = 35.0) -> History:
    records = [Stored(seq, "parley.decisions.x", d) for seq, d in enumerate(decisions, 1)]
    roots = [Published(ASK, 1, "gate", "delegation_request")]
    return history_from(
        records, roots, answering=AGENTS, people=("cli",), delegation_bound_s=bound_s
    )


def _check(history: History) -> ChaosReport:
    return check_history(
        history.published,
        history.applied,
        stored_ids=history.stored_ids,
        delegations=history.delegations,
        repeats_refused=history.repeats_refused,
    )


def test_a_fan_out_and_a_chain_back_to_one_target_are_not_duplicates() -> None:
    history = _history(_delegation())
    report = _check(history)
    assert report.violations() == []
    purposes = sorted(a.purpose for a in history.applied if a.envelope_id == ASK)
    assert purposes == [
        "decision",
        "delegation_request to claude (round 0, request 0)",
        "delegation_request to claude (round 1, request 0)",
        "delegation_request to reviewer (round 0, request 1)",
        "delegation_response",
    ]
    owed = {(p.receiver, p.envelope_id) for p in history.published}
    assert {("gpt", ASK), ("claude", FAN_OUT[0]), ("reviewer", FAN_OUT[1])} <= owed


def test_requests_the_checker_cannot_place_differ_by_target_only() -> None:
    """Ids not derived from the call (a host that made fresh ones): one per target is a
    fan-out; two to one target for one call are a duplicate effect."""
    fan = [
        _decision(ASK, "cli", "gpt", "delegation_request"),
        _decision("x1", "gpt", "claude", "delegation_request", ASK),
        _decision("x2", "gpt", "reviewer", "delegation_request", ASK),
    ]
    assert _check(_history(fan)).duplicate_effects == ()
    again = _decision("x3", "gpt", "claude", "delegation_request", ASK)
    report = _check(_history([*fan, again]))
    assert report.duplicate_effects == (("gpt", ASK, "delegation_request to claude"),)


def test_a_request_sent_again_under_its_id_and_refused_is_no_duplicate() -> None:
    """gpt killed after sending its fan-out sends it again with the same ids; past JetStream's
    window the gate refuses each repeat (DUPLICATE_ENVELOPE): a second decision on that id."""
    repeat = _decision(
        FAN_OUT[0],
        "gpt",
        "claude",
        "delegation_request",
        ASK,
        decision_id=derive_id(FAN_OUT[0], "duplicate.42"),
        allowed=False,
        code=ErrorCode.DUPLICATE_ENVELOPE,
        rule="duplicate_id",
    )
    person_again = _decision(
        ASK,
        "cli",
        "gpt",
        "delegation_request",
        decision_id="d-ask-again",
        allowed=False,
        code=ErrorCode.DUPLICATE_ENVELOPE,
        rule="duplicate_id",
    )
    history = _history([*_delegation(), repeat, person_again])
    report = _check(history)
    assert report.violations() == []
    assert report.dedup_escapes == ()
    assert report.repeats_refused == 2
    assert [(d.request_id, d.answer) for d in history.delegations] == [(ASK, "delegation_response")]


def test_a_second_answer_under_a_new_id_is_still_a_duplicate_effect() -> None:
    """The gate refuses it (one answer per call), but gpt answered the person twice."""
    twice = _decision(
        "done-2",
        "gpt",
        "cli",
        "delegation_response",
        ASK,
        allowed=False,
        code=ErrorCode.DUPLICATE_ENVELOPE,
        rule="duplicate_answer",
    )
    report = _check(_history([*_delegation(), twice]))
    assert report.duplicate_effects == (("gpt", ASK, "delegation_response"),)


def test_an_unanswered_delegation_is_reported() -> None:
    report = _check(_history(_delegation(answered=False)))
    assert report.unanswered == (ASK,)
    assert report.violations() == ["1 delegation(s) never answered"]
    table = format_report(report)
    assert re.search(r"^delegations +1$", table, re.M)
    assert re.search(r"^  answered +0$", table, re.M)
    assert re.search(r"^  unanswered +1$", table, re.M)
    assert "FAIL" in table


def test_an_unanswered_delegation_is_told_with_the_decisions_of_its_trace() -> None:
    decisions = _delegation(answered=False)
    records = [Stored(seq, "parley.decisions.x", d) for seq, d in enumerate(decisions, 1)]
    out = io.StringIO()
    print_unanswered([ASK, "never-decided"], records, out)
    told = out.getvalue().splitlines()
    assert told[0].startswith(f"  unanswered {ASK}: delegation_request(cli>gpt allowed)@1 ")
    assert told[0].endswith(f"delegation_response(claude>gpt allowed)@{len(decisions)}")
    assert told[1] == "  unanswered never-decided: no decision in its trace"


def test_an_answer_past_the_bound_is_reported() -> None:
    report = _check(_history(_delegation(), bound_s=1.0))
    assert report.late_answers == (ASK,)
    assert "1 delegation(s) answered past their bound" in report.violations()


def test_a_refused_delegation_is_answered_by_the_gates_error() -> None:
    refused = _decision(
        ASK,
        "cli",
        "gpt",
        "delegation_request",
        allowed=False,
        code=ErrorCode.RATE_LIMITED,
        rule="rate_per_minute",
    )
    history = _history([refused])
    report = _check(history)
    assert report.violations() == []
    assert report.answered_by == {"refused": 1}


def test_an_agents_error_answers_the_delegation() -> None:
    decisions = [
        _decision(ASK, "cli", "gpt", "delegation_request"),
        _decision("oops", "gpt", "cli", "error", ASK),
    ]
    report = _check(_history(decisions))
    assert report.violations() == []
    assert report.answered_by == {"error": 1}


def test_a_run_without_delegations_shows_no_delegation_rows() -> None:
    table = format_report(check_history([], []))
    assert "delegations" not in table


def test_an_answer_to_the_person_is_end_to_end_progress() -> None:
    """A run that only delegates still measures recovery: by the answers people get."""
    history = _history(_delegation())
    answered = (T0 + timedelta(seconds=2)).timestamp()
    assert history.end_to_end == [answered]
