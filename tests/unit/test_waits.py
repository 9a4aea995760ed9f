"""A caller's durable wait (actors/delegation/_wait.py) and what answers become for its brain."""

from __future__ import annotations

import msgspec
import pytest

from actors.delegation import (
    CallSubAgent,
    Delegate,
    RequestResult,
    UseTool,
    Wait,
    aggregate_status,
    answered_request,
    expire,
    finish_round,
    next_deadline,
    record_result,
    request_envelope,
    result_of,
    start_round,
)
from schemas import (
    APPROVAL_TIMEOUT_S,
    ApprovalRule,
    DelegationRequest,
    DelegationResponse,
    Error,
    ErrorCode,
    SubAgentArgs,
    SubAgentCall,
    SubAgentResult,
    TokenUsage,
    ToolError,
    ToolResult,
    new_id,
    utc_now,
)

NOW = 1_800_000_000_000


def _wait() -> Wait:
    requests = (
        Delegate(request_id="a", target_employee="coder", objective="code", deadline_ms=1000),
        Delegate(request_id="b", target_employee="writer", objective="docs", deadline_ms=5000),
    )
    fresh = Wait(call_id="call-1", caller="cli", call=b"{}", headers={})
    return start_round(fresh, "asking", requests, ["env-a", "env-b"], NOW, tokens=10)


def _ok(request_id: str, text: str = "done") -> RequestResult:
    return RequestResult(request_id=request_id, status="success", content=text)


def test_a_round_completes_with_one_result_per_request_in_request_order() -> None:
    wait = _wait()
    assert (wait.tokens, wait.expires_ms) == (10, (NOW + 1000, NOW + 5000))
    second = record_result(wait, "env-b", _ok("x", "docs done"))
    assert second is not None and not second.complete
    assert second.results["b"].request_id == "b"  # named by the request, not the answer
    both = record_result(second, "env-a", _ok("a", "code done"))
    assert both is not None and both.complete
    done = finish_round(both)
    assert done.requests == () and done.results == {}
    (round_,) = done.rounds
    assert [r.content for r in round_.results] == ["code done", "docs done"]
    assert round_.text == "asking"


def test_a_repeated_or_stray_answer_is_ignored() -> None:
    wait = record_result(_wait(), "env-a", _ok("a"))
    assert wait is not None
    assert record_result(wait, "env-a", _ok("a", "again")) is None
    assert record_result(wait, "env-zzz", _ok("z")) is None


def test_a_deadline_times_out_only_what_is_still_unanswered() -> None:
    wait = _wait()
    assert next_deadline(wait) == NOW + 1000
    assert expire(wait, NOW + 999) is None
    late = expire(wait, NOW + 1000)
    assert late is not None and not late.complete
    assert late.results["a"].status == "timeout"
    assert late.results["a"].content == "Delegation timeout after 1000ms"
    assert next_deadline(late) == NOW + 5000
    answered = record_result(late, "env-b", _ok("b"))
    assert answered is not None and answered.complete and next_deadline(answered) is None
    # The answer that comes after its deadline changes nothing.
    assert record_result(answered, "env-a", _ok("a")) is None


def test_finishing_an_incomplete_round_is_refused() -> None:
    with pytest.raises(ValueError, match="still waits"):
        finish_round(_wait())


def test_the_wait_survives_a_round_trip_through_its_bytes() -> None:
    wait = record_result(_wait(), "env-a", _ok("a"))
    assert wait is not None
    assert msgspec.json.decode(msgspec.json.encode(wait), type=Wait) == wait


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ((), "success"),
        (("success", "success"), "success"),
        (("success", "timeout"), "partial"),
        (("partial",), "partial"),
        (("failed", "timeout"), "failed"),
    ],
)
def test_seed_003_fan_out_status(statuses: tuple[str, ...], expected: str) -> None:
    results = [
        RequestResult(request_id=str(i), status=s, content="")  # type: ignore[arg-type]
        for i, s in enumerate(statuses)
    ]
    assert aggregate_status(results) == expected


def test_requests_become_seed_envelopes_whose_answers_name_them() -> None:
    delegate = Delegate(
        request_id="r1", target_employee="coder", objective="o", intermediate_results=["x"]
    )
    envelope = request_envelope(
        delegate, envelope_id="e1", sender="planner", user_id="u", session_id="s", depth=1
    )
    assert isinstance(envelope, DelegationRequest)
    assert (envelope.request_id, envelope.origin_employee, envelope.current_depth) == (
        "e1",
        "planner",
        1,
    )
    assert envelope.handoff_data.intermediate_results == ["x"]
    sub = CallSubAgent(request_id="r2", args=SubAgentArgs(agent_name="reviewer", task="t"))
    call = request_envelope(
        sub, envelope_id="e2", sender="planner", user_id="u", session_id="s", depth=1
    )
    assert isinstance(call, SubAgentCall) and call.call_id == "e2"
    response = DelegationResponse(
        id=new_id(),
        created_at=utc_now(),
        request_id="e1",
        target_employee="coder",
        summary="s",
        result="the code",
        token_usage=TokenUsage(total=812),
        duration_ms=2000,
        status="success",
    )
    assert answered_request(response) == "e1"
    shown = result_of(response, delegate)
    assert (shown.status, shown.tokens, shown.duration_ms) == ("success", 812, 2000)
    assert "the code" in shown.content
    result = SubAgentResult(
        id=new_id(), created_at=utc_now(), call_id="e2", agent_name="reviewer", success=False,
        output="", errors=("no access",),
    )  # fmt: skip
    assert answered_request(result) == "e2"
    assert (
        result_of(result, sub).status == "failed" and "no access" in result_of(result, sub).content
    )
    refused = Error(
        id=new_id(), created_at=utc_now(), code=ErrorCode.TARGET_NOT_ALLOWED, message="no",
        cause_id="e1",
    )  # fmt: skip
    assert answered_request(refused) == "e1"
    failed = result_of(refused, delegate)
    assert (
        failed.status == "failed" and "coder could not answer: TARGET_NOT_ALLOWED" in failed.content
    )


def test_a_result_refused_because_its_session_ended_says_so_whatever_answered_it() -> None:
    """The host stops asking its brain once a step comes back refused for an ended session
    (actors/agent/_host.py): a tool runtime's failed result and an error envelope both say it,
    and no other failure does."""
    use = UseTool(request_id="t1", capability="File.Write")
    delegate = Delegate(request_id="d1", target_employee="coder", objective="code")

    def tool(code: str) -> ToolResult:
        return ToolResult(
            id=new_id(), created_at=utc_now(), tool_name="File.Write", session_id="s1",
            task_id="s1", step_id="t1", status="failed", error=ToolError(code=code, message="x"),
        )  # fmt: skip

    def error(code: ErrorCode) -> Error:
        return Error(id=new_id(), created_at=utc_now(), code=code, message="x", cause_id="d1")

    assert result_of(tool("SESSION_EXPIRED"), use).session_ended
    assert result_of(error(ErrorCode.SESSION_EXPIRED), delegate).session_ended
    assert not result_of(tool("TOOL_EXECUTION_FAILED"), use).session_ended
    assert not result_of(error(ErrorCode.TARGET_NOT_ALLOWED), delegate).session_ended
    assert not _ok("t1").session_ended


def test_a_tool_request_waits_past_a_default_approval_and_its_run() -> None:
    """A brain that names no deadline (a model's tool call) waits for a request held under
    an approval rule's default wait, and a minute of running after it: at 120 s, a request
    approved in the rule's last three minutes was never run (a newcomer's walk)."""
    waited_s = UseTool(request_id="r1", capability="File.Write").deadline_ms / 1000
    assert waited_s >= APPROVAL_TIMEOUT_S + 60
    assert waited_s == ApprovalRule(approval_rule_id="r", title="t").timeout_s + 60
