"""The chaos checker's LLM mix verdicts on made-up histories, and the mix's own agent.

A person delegates to the narrator, whose gateway brain sends one `llm_request` per
delegation; the gateway answers each with one `llm_response`. Every promise (exactly one
answer per request id, a failure typed, no call refused) is broken here on purpose once, and
each must fail the verdict; a call asked again after its host's redelivery is a new call,
not a duplicate effect.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import msgspec
import pytest

from actors.agent._profile import GatewayBrainConfig, load_profile
from schemas import Decision, ErrorCode, decode_bundle, derive_id, utc_now
from tools.chaos._agents import LLM_AGENT, LLM_MODEL, write_agents
from tools.chaos._checker import Published, check_history, format_report
from tools.chaos._command import CHAOS_POLICY
from tools.chaos._llm_check import LlmCheck, check_llm, model_calls_from
from tools.chaos._llm_mix import count_from_store, gateway_kills
from tools.chaos._llm_provider import count_streams
from tools.chaos._reads import Stored
from tools.chaos._records import history_from
from tools.chaos._topology import GATEWAY

T0 = utc_now()
ASK = "ask"
"""The person's delegation to the narrator."""
CALL = derive_id(ASK, "llm:1:1")
"""The narrator's model call for it, as its gateway brain names it (first delivery)."""


def _decision(
    envelope_id: str, sender: str, target: str, kind: str, cause: str = "", **verdict: object
) -> Decision:
    return Decision(
        id=str(verdict.pop("decision_id", f"d-{envelope_id}")),
        created_at=T0,
        decided_at=T0,
        allowed=bool(verdict.pop("allowed", True)),
        sender=sender,
        target=target,
        envelope_id=envelope_id,
        envelope_kind=kind,
        causation_id=cause,
        trace_id=ASK,
        **verdict,  # type: ignore[arg-type]  # request_id, outcome, reason, code, rule
    )


def _request(call: str = CALL, **verdict: object) -> Decision:
    return _decision(call, LLM_AGENT, GATEWAY, "llm_request", ASK, request_id=call, **verdict)


def _answer(
    call: str = CALL, outcome: str = "success", reason: str = "", **verdict: object
) -> Decision:
    answer_id = str(verdict.pop("answer_id", derive_id(call, "llm_response")))
    return _decision(
        answer_id,
        GATEWAY,
        LLM_AGENT,
        "llm_response",
        call,
        request_id=call,
        outcome=outcome,
        reason=reason,
        **verdict,
    )


def _history(*answers: Decision) -> list[Decision]:
    """The delegation, the narrator's model call, `answers` (one success by default), and
    the narrator's answer to the person."""
    return [
        _decision(ASK, "cli", LLM_AGENT, "delegation_request"),
        _request(),
        *(answers or (_answer(),)),
        _decision("reply", LLM_AGENT, "cli", "delegation_response", ASK),
    ]


def _check(decisions: list[Decision]) -> LlmCheck:
    calls, refused = model_calls_from(decisions, LLM_AGENT)
    return check_llm(calls, {"started": 2, "done": 1, "cut": 1}, 0, refused)


def test_a_call_answered_once_passes_and_a_typed_failure_is_an_answer() -> None:
    check = _check(_history())
    assert check.violations() == [] and check.calls == 1 and check.outcomes == {"success": 1}
    failed = _answer(outcome="failed", reason="AGENT_UNAVAILABLE: provider local's stream: cut")
    check = _check(_history(failed))
    assert check.violations() == [] and check.outcomes == {"failed": 1}


def test_the_same_answer_again_refused_as_a_repeat_is_one_answer() -> None:
    """The stored answer published again after a redelivery keeps its envelope id: the gate
    refuses the copy as a repeat, and the call was answered once."""
    repeat = _answer(
        decision_id="d-repeat",
        allowed=False,
        code=ErrorCode.DUPLICATE_ENVELOPE,
        rule="duplicate_id",
    )
    assert _check(_history(_answer(), repeat)).violations() == []


@pytest.mark.parametrize(
    ("answers", "broken"),
    [
        pytest.param((), "1 model call(s) admitted and never answered", id="no-answer"),
        pytest.param(
            (_answer(), _answer(answer_id="second", outcome="success")),
            "1 model call(s) answered more than once",
            id="two-answers",
        ),
        pytest.param(
            (_answer(), _answer(answer_id="second", allowed=False, code=ErrorCode.INVALID_REQUEST)),
            "1 model call(s) answered more than once",
            id="a-second-answer-the-gate-refused",
        ),
        pytest.param(
            (_answer(outcome="failed", reason=""),),
            "1 model call(s) failed without a typed error",
            id="untyped-failure",
        ),
    ],
)
def test_each_broken_promise_fails_the_verdict(answers: tuple[Decision, ...], broken: str) -> None:
    decisions = _history(*answers) if answers else _history()[:2]
    assert _check(decisions).violations() == [broken]


def test_a_call_the_gate_refused_fails_but_a_repeat_does_not() -> None:
    repeat = _request(decision_id="d-again", allowed=False, code=ErrorCode.DUPLICATE_ENVELOPE)
    repeat = msgspec.structs.replace(repeat, rule="duplicate_id")
    assert _check([*_history(), repeat]).violations() == []
    refused = _request(
        "other", decision_id="d-other", allowed=False, code=ErrorCode.TARGET_NOT_ALLOWED
    )
    assert _check([*_history(), refused]).violations() == ["1 model call(s) refused by the gate"]


def test_the_llm_verdict_fails_the_run_and_a_redelivered_turn_asks_again_without_a_duplicate() -> (
    None
):
    """Through the whole checker: the narrator's host killed mid-call asks again under the
    next delivery's id (by design): no duplicate effect; a second answer fails the run."""
    again = derive_id(ASK, "llm:2:1")
    decisions = [*_history(), _request(again), _answer(again)]
    records = [Stored(seq, "parley.decisions.x", d) for seq, d in enumerate(decisions, 1)]
    history = history_from(
        records, [Published(ASK, 1, "gate", "delegation_request")], answering=(LLM_AGENT,)
    )
    twice = _check([*decisions, _answer(answer_id="second")])
    report = check_history(
        history.published, history.applied, stored_ids=history.stored_ids, llm=twice
    )
    assert report.lost == () and report.duplicate_effects == ()
    assert report.violations() == ["1 model call(s) answered more than once"]
    table = format_report(report)
    assert re.search(r"^model calls admitted +2 \(success: 2\)$", table, re.MULTILINE), table
    assert re.search(r"^  provider streams +2 begun, 1 finished, 1 cut", table, re.MULTILINE)
    assert re.search(r"^verdict +FAIL: ", table, re.MULTILINE), table


def test_streams_and_answers_from_the_store_are_counted_from_the_logs(tmp_path: Path) -> None:
    provider = tmp_path / "provider.log"
    provider.write_text("started 1\nstarted 2\ncut 1\ndone 2\nstarted 3\n")
    assert count_streams(provider) == {"started": 3, "done": 1, "cut": 1}
    assert count_streams(tmp_path / "missing.log") == {"started": 0, "done": 0, "cut": 0}
    gateway = tmp_path / "llm.log"
    gateway.write_text(
        '{"msg": "answered again from the store"}\nTraceback: answered again from the store\n'
        '{"msg": "llm_request_started"}\n{"msg": "answered again from the store"}\n'
    )
    assert count_from_store(gateway) == 2
    assert [fault.target for fault in gateway_kills(30)] == [GATEWAY, GATEWAY]


def test_the_narrator_streams_a_model_the_bundle_allows_through_the_gateway(
    tmp_path: Path,
) -> None:
    """The run's bundle and the narrator's profile agree: a model outside the allowlist or
    a gateway the narrator may not reach would refuse every call, and the run test nothing."""
    folder = write_agents(tmp_path / "agents", (LLM_AGENT,), delegating=False)
    profile = load_profile(LLM_AGENT, folder)
    assert isinstance(profile.brain, GatewayBrainConfig) and profile.brain.stream
    assert profile.model == LLM_MODEL
    bundle = decode_bundle(msgspec.json.encode(tomllib.loads(CHAOS_POLICY.read_text())))
    assert LLM_MODEL in bundle.llm_policy.allowed_models
    assert GATEWAY in bundle.profiles[LLM_AGENT].allowed_targets
    assert LLM_AGENT in bundle.profiles["cli"].allowed_targets
