"""The interaction records of agents calling agents: what a call's and an answer's decision
carry (seed 003's and 004's figures), what the auditor makes of them, and that a sub-agent
call's context is copied into neither."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

import msgspec
from nats.js.kv import KeyValue

from actors.auditor._facts import FactSource, Redactor, records_for
from actors.gate._decisions import decision_for
from actors.gate._plan import Deny
from actors.gate._records import Level, Position
from bus import BundleStore
from schemas import (
    AnyEnvelope,
    ContextFilter,
    ContextMessage,
    Control,
    Decision,
    DelegationRequest,
    DelegationResponse,
    Error,
    ErrorCode,
    FilteredContext,
    LlmRequest,
    LlmResponse,
    LlmUsage,
    SubAgentArgs,
    SubAgentCall,
    SubAgentResult,
    TokenUsage,
    encode,
)

AT = datetime(2026, 3, 1, 12, tzinfo=UTC)
DEADLINE_MS = int(AT.timestamp() * 1000) + 5000
CONTEXT = "the caller's private notes: the launch code is 0000"
KEY = "sk-proj-" + "Qm41Zt" * 8
SOURCE = FactSource("PARLEY_EVENTS", 9, "tr", 2, "c", "cli", AT)
REDACT = Redactor(key=b"k")


def _bundles() -> BundleStore:
    """The bundle store's two fields a decision reads; no bucket behind it."""
    return BundleStore(cast(KeyValue, None), {}, "t")


def _position(target: str, *levels: Level) -> Position:
    return Position(
        envelope_id="x",
        trace_id="tr",
        origin="cli",
        sender="planner",
        target=target,
        kind="k",
        levels=(Level(holder="cli"), *levels),
    )


def _decide(
    envelope: AnyEnvelope, position: Position, deny: Deny | None = None, sender: str = "planner"
) -> Decision:
    return decision_for(
        sender,
        "cause",
        envelope,
        position,
        "allowed_targets" if deny else "allow",
        deny,
        basis="",
        bundles=_bundles(),
        decided_by="gate/1",
    )


def _sub_agent_call() -> SubAgentCall:
    return SubAgentCall(
        id="call-1",
        created_at=AT,
        call_id="call-1",
        caller="planner",
        session_id="s1",
        args=SubAgentArgs(
            agent_name="reviewer",
            task="check the parser",
            context=ContextFilter(last_messages=2),
            allowed_tools=("read",),
        ),
        context=FilteredContext(
            messages=(ContextMessage(role="user", content=CONTEXT),), total_tokens=12
        ),
    )


def test_a_sub_agent_calls_decision_names_its_task_tools_and_deadline_but_not_its_context() -> None:
    level = Level(holder="reviewer", call_id="call-1", tools=("read",), deadline_ms=DEADLINE_MS)
    decision = _decide(_sub_agent_call(), _position("reviewer", Level(holder="planner"), level))
    assert decision.objective == "check the parser" and decision.session_id == "s1"
    assert decision.tools == ("read",)
    assert decision.deadline_at == datetime.fromtimestamp(DEADLINE_MS / 1000, UTC)
    assert CONTEXT.encode() not in encode(decision)


def test_a_refused_call_was_granted_nothing() -> None:
    deny = Deny(ErrorCode.TARGET_NOT_ALLOWED, "allowed_targets", "no")
    decision = _decide(_sub_agent_call(), _position("planner", Level(holder="planner")), deny)
    assert decision.tools is None and decision.deadline_at is None
    assert CONTEXT.encode() not in encode(decision)


def test_a_delegation_is_recorded_in_its_parent_session() -> None:
    request = DelegationRequest(
        id="d1",
        created_at=AT,
        request_id="r1",
        origin_employee="planner",
        target_employee="coder",
        user_id="",
        parent_session_id="s9",
        objective="code it",
        input="the parser",
    )
    decision = _decide(request, _position("coder", Level(holder="planner")))
    assert (decision.session_id, decision.objective, decision.preview) == (
        "s9",
        "code it",
        "the parser",
    )
    assert decision.outcome == "" and decision.tokens is None


def test_a_delegation_response_carries_seed_003s_figures() -> None:
    answer = DelegationResponse(
        id="a1",
        created_at=AT,
        request_id="r1",
        target_employee="coder",
        summary="s",
        result="half of it",
        token_usage=TokenUsage(prompt=500, completion=312, total=812),
        duration_ms=2000,
        status="partial",
        error="the reviewer timed out",
    )
    decision = _decide(answer, _position("planner"), sender="coder")
    assert (decision.outcome, decision.tokens, decision.duration_ms) == ("partial", 812, 2000)
    assert decision.reason == "the reviewer timed out"
    assert decision.tools is None  # an answer opens no level: nothing granted


def test_a_sub_agent_result_carries_seed_004s_figures_bounded() -> None:
    result = SubAgentResult(
        id="a2",
        created_at=AT,
        call_id="call-1",
        agent_name="reviewer",
        success=False,
        output="could not finish",
        tool_calls=("read", "x" * 100, *(f"t{n}" for n in range(40))),
        tokens_used=3245,
        duration_seconds=12,
        errors=("read failed", "x" * 300),
    )
    decision = _decide(result, _position("planner"), sender="reviewer")
    assert (decision.outcome, decision.tokens, decision.duration_ms) == ("failed", 3245, 12000)
    assert decision.tools_used[0] == "read" and len(decision.tools_used) == 32
    assert all(len(name) <= 64 for name in decision.tools_used)
    assert decision.reason.startswith("read failed; ") and len(decision.reason) == 200
    # What the gate publishes, the auditor can decode: the bounds are the schema's.
    assert msgspec.json.decode(encode(decision), type=Decision) == decision


def test_an_error_answer_is_a_failure_or_a_timeout() -> None:
    def error(code: ErrorCode) -> Decision:
        envelope = Error(id="e", created_at=AT, code=code, message="brain down", cause_id="c")
        return _decide(envelope, _position("planner"), sender="coder")

    failed = error(ErrorCode.AGENT_UNAVAILABLE)
    assert (failed.outcome, failed.reason) == ("failed", "AGENT_UNAVAILABLE: brain down")
    assert error(ErrorCode.DEADLINE_EXCEEDED).outcome == "timeout"


def test_the_auditor_copies_the_figures_and_redacts_what_an_answer_says() -> None:
    result = SubAgentResult(
        id="a3",
        created_at=AT,
        call_id="call-1",
        agent_name="reviewer",
        success=False,
        output="no",
        tool_calls=("read", f"curl -H 'Authorization: Bearer {KEY}'"),
        tokens_used=40,
        duration_seconds=1,
        errors=(f"the key {KEY} was refused",),
    )
    decision = _decide(result, _position("planner"), sender="reviewer")
    records = records_for(decision, SOURCE, tenant="t", redactor=REDACT)
    assert [r.profile for r in records] == ["reviewer", "planner"]
    for record in records:
        assert (record.outcome, record.tokens, record.duration_ms) == ("failed", 40, 1000)
        assert record.status == "delivered" and record.success is True  # the gate's verdict
        assert record.failure_reason and "[REDACTED:" in record.failure_reason
        assert record.tools_used[0] == "read" and "[REDACTED:" in record.tools_used[1]
        assert KEY.encode() not in encode(record)


def test_the_auditor_keeps_a_calls_grant_and_deadline_and_no_context() -> None:
    level = Level(holder="reviewer", call_id="call-1", tools=("read",), deadline_ms=DEADLINE_MS)
    decision = _decide(_sub_agent_call(), _position("reviewer", Level(holder="planner"), level))
    records = records_for(decision, SOURCE, tenant="t", redactor=REDACT)
    assert len(records) == 2
    for record in records:
        assert record.tools == ("read",) and record.deadline_at == decision.deadline_at
        assert record.objective == "check the parser" and record.failure_reason is None
        assert CONTEXT.encode() not in encode(record)


def test_a_persons_decision_on_a_held_step_is_recorded_with_what_it_decided() -> None:
    """An audit reader can tell who approved which held step, and why one was rejected (seed
    002 §3.6): the control's action, approval id and reason are its record's objective."""
    approve = Control(
        id="c1", created_at=AT, action="approve", session_id="s1", target="tools",
        approval_id="held-1",
    )  # fmt: skip
    reject = msgspec.structs.replace(approve, id="c2", action="reject", reason="not that file")
    stop = Control(id="c3", created_at=AT, action="stop", session_id="s1", reason="done")
    objectives = [
        _decide(control, _position("tools"), sender="person-alice").objective
        for control in (approve, reject, stop)
    ]
    assert objectives == ["approve held-1", "reject held-1: not that file", "stop: done"]
    (record, _target_copy) = records_for(
        _decide(reject, _position("tools"), sender="person-alice"),
        SOURCE,
        tenant="t",
        redactor=REDACT,
    )
    assert (record.requester, record.objective) == (
        "person-alice",
        "reject held-1: not that file",
    )


def test_a_model_calls_records_carry_its_metadata_and_none_of_its_words() -> None:
    secret = "the prompt's private words"
    request = LlmRequest(
        id="m1", created_at=AT, request_id="m1", session_id="s1", task_id="s1", step_id="1",
        model="gpt-4o-mini", messages=({"role": "user", "content": secret},),
        max_output_tokens=900,
    )  # fmt: skip
    asked = _decide(request, _position("llm"))
    assert asked.objective == "model gpt-4o-mini (openai), 1 messages, at most 900 output tokens"
    answer = LlmResponse(
        id="m2", created_at=AT, request_id="m1", session_id="s1", model="gpt-4o-mini",
        provider="openai", status="succeeded", text="an answer",
        usage=LlmUsage(prompt_tokens=70, completion_tokens=50, total_tokens=120),
        finish_reason="stop",
    )  # fmt: skip
    answered = _decide(answer, _position("planner"), sender="llm")
    assert answered.objective == (
        "model gpt-4o-mini (openai): 70 prompt + 50 completion tokens, finished: stop"
    )
    assert answered.tokens == 120
    assert all(
        secret not in r.objective for r in records_for(asked, SOURCE, tenant="t", redactor=REDACT)
    )
