"""`parley trace` and `parley calls` over hand-made audit records of agents calling agents."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from schemas import AuditRecord
from tools._interactions import decisions_by_envelope, interactions, verdict
from tools._tracetree import render_trace
from tools.calls import render_calls, select_records

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)
_seq = iter(range(1, 10_000))


def _at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def _record(
    envelope_id: str,
    kind: str,
    sender: str,
    target: str,
    ms: int,
    *,
    cause: str = "",
    trace: str = "tr",
    hop: int = 1,
    **fields: Any,
) -> AuditRecord:
    """A decision record as the auditor writes it for the sender, with `fields` changed."""
    record = AuditRecord(
        id=f"rec-{envelope_id}",
        created_at=_at(ms),
        tenant="t",
        profile=sender,
        fact="decision",
        trace_id=trace,
        hop_count=hop,
        envelope_id=envelope_id,
        decision_code="ALLOW",
        policy_version=1,
        requester=sender,
        target=target,
        status="delivered",
        task=kind,
        success=True,
        causation_id=cause,
        chain_index=next(_seq),
    )
    return msgspec.structs.replace(record, **fields)


def _call(
    envelope_id: str,
    sender: str,
    target: str,
    ms: int,
    *,
    kind: str = "delegation_request",
    **fields: Any,
) -> AuditRecord:
    return _record(envelope_id, kind, sender, target, ms, **fields)


def _answer(
    envelope_id: str,
    call: AuditRecord,
    ms: int,
    outcome: str = "success",
    *,
    kind: str = "",
    **fields: Any,
) -> AuditRecord:
    answered = "sub_agent_result" if call.task == "sub_agent_call" else "delegation_response"
    return _record(
        envelope_id,
        kind or answered,
        call.target,
        call.requester,
        ms,
        cause=call.envelope_id,
        hop=call.hop_count - 1,
        outcome=outcome,
        **fields,
    )


def _copy_for_target(record: AuditRecord) -> AuditRecord:
    """The target's copy of an admitted decision, as the auditor also writes it."""
    return msgspec.structs.replace(record, profile=record.target, id=record.id + "-target")


def _fan_out() -> list[AuditRecord]:
    """cli -> planner; the planner asks three specialists at once; one is refused."""
    root = _call("p", "cli", "planner", 0, objective="Assess the parser", session_id="s1")
    coder = _call("c", "planner", "coder", 10, cause="p", hop=2, objective="code for it")
    writer = _call("w", "planner", "writer", 11, cause="p", hop=2, objective="docs for it")
    stranger = _call(
        "x",
        "planner",
        "stranger",
        12,
        cause="p",
        hop=2,
        status="rejected",
        decision_code="TARGET_NOT_ALLOWED",
        success=False,
        failure_reason="allowed_targets: planner may not send to stranger (allowed: coder)",
    )
    return [
        root,
        _copy_for_target(root),
        coder,
        writer,
        stranger,
        _answer("ca", coder, 110, tokens=174, duration_ms=100),
        _answer("wa", writer, 1600, "failed", tokens=20, failure_reason="no docs found"),
        _answer("pa", root, 2000, "partial", tokens=690, duration_ms=2000),
    ]


def test_a_fan_out_is_one_line_per_call_with_its_answer_folded_in() -> None:
    lines = render_trace("tr", _fan_out())
    assert lines[0] == "trace tr: 7 decision(s), 0 session event(s)"
    assert len(lines) == 5  # the root and three calls; no answer has a line of its own
    assert lines[1].startswith("└─ cli -> planner  delegation  hop 1  delivered policy v1")
    assert lines[1].endswith("=> PARTIAL (690 tokens, 2s)")
    assert lines[2].startswith("   ├─ planner -> coder  delegation fan-out  hop 2  delivered")
    assert lines[2].endswith("=> SUCCESS (174 tokens, 0.1s)")
    assert lines[3].startswith("   ├─ planner -> writer  delegation fan-out  hop 2")
    assert lines[3].endswith("=> FAILED (20 tokens, 1.6s; no docs found)")  # time from records
    assert lines[4].startswith(
        "   └─ planner -> stranger  delegation fan-out  hop 2  rejected TARGET_NOT_ALLOWED"
    )
    assert lines[4].endswith("(allowed_targets: planner may not send to stranger (allowed: coder))")
    assert "=>" not in lines[4]


def test_steps_one_after_the_other_are_a_chain() -> None:
    root = _call("p", "cli", "planner", 0)
    first = _call("c1", "planner", "coder", 10, cause="p", hop=2)
    second = _call("c2", "planner", "reviewer", 300, cause="p", hop=2)
    records = [root, first, _answer("a1", first, 200), second, _answer("a2", second, 400)]
    lines = render_trace("tr", records)
    assert "planner -> coder  delegation chain  hop 2" in lines[2]
    assert "planner -> reviewer  delegation chain  hop 2" in lines[3]
    assert "└─ cli -> planner  delegation  hop 1" in lines[1] and "no answer yet" in lines[1]


def test_a_sub_agent_line_shows_the_tools_granted_and_used() -> None:
    call = _call("s", "planner", "reviewer", 0, kind="sub_agent_call", tools=("read", "grep"))
    answer = _answer("sa", call, 2500, tokens=3245, duration_ms=2000, tools_used=("read",))
    (_, line) = render_trace("tr", [call, answer])
    assert "planner -> reviewer  sub-agent  hop 1" in line
    assert line.endswith("=> SUCCESS (3245 tokens, 2s)  tools: read, grep  used: read")
    (_, bare) = render_trace("tr", [_call("s2", "planner", "coder", 0, tools=())])
    assert bare.endswith("=> no answer yet  tools: none")


def test_a_deadline_passed_without_an_answer_is_a_timeout_only_once_it_has_passed() -> None:
    call = _call("c", "planner", "sloth", 0, deadline_at=_at(1500))
    (item,) = interactions(decisions_by_envelope([call]))
    assert verdict(item) is None and verdict(item, now=_at(1499)) is None
    ended = verdict(item, now=_at(1500))
    assert ended is not None and str(ended) == "TIMEOUT (no answer within its 1.5s deadline)"
    assert ended.at == _at(1500)
    (_, line) = render_trace("tr", [call], now=_at(9000))
    assert line.endswith("=> TIMEOUT (no answer within its 1.5s deadline)")


def test_an_answer_after_the_deadline_is_a_timeout() -> None:
    call = _call("c", "planner", "sloth", 0, deadline_at=_at(1500))
    late = _answer("a", call, 30_000, tokens=9, duration_ms=29_900)
    (item,) = interactions(decisions_by_envelope([call, late]))
    assert str(verdict(item)) == "TIMEOUT (answered SUCCESS after 30s, past its 1.5s deadline)"


def test_an_error_answer_and_a_refused_answer() -> None:
    call = _call("c", "planner", "coder", 0)
    error = _answer(
        "e", call, 250, "failed", kind="error", failure_reason="AGENT_UNAVAILABLE: brain down"
    )
    (item,) = interactions(decisions_by_envelope([call, error]))
    assert str(verdict(item)) == "FAILED (0.2s; AGENT_UNAVAILABLE: brain down)"
    refused = _answer(
        "r",
        call,
        300,
        status="rejected",
        decision_code="DUPLICATE_ENVELOPE",
        failure_reason="duplicate_answer: coder already answered",
    )
    (item,) = interactions(decisions_by_envelope([call, refused]))
    assert str(verdict(item)) == (
        "REFUSED (its answer was refused: DUPLICATE_ENVELOPE: coder already answered)"
    )
    # An admitted answer wins over a refused one, whatever came first.
    (item,) = interactions(decisions_by_envelope([call, refused, error]))
    assert item.answer is error


def test_what_an_answer_caused_hangs_under_its_call() -> None:
    call = _call("c", "planner", "coder", 0)
    answer = _answer("a", call, 100)
    after = _record("n", "agent_call", "planner", "gpt", 200, cause="a")
    lines = render_trace("tr", [call, answer, after])
    assert lines[1].startswith("└─ planner -> coder  delegation")
    assert lines[2].startswith("   └─ planner -> gpt  agent_call")


def test_calls_lists_seed_004s_lines_in_time_order() -> None:
    lines = render_calls(interactions(decisions_by_envelope(_fan_out())))
    assert lines == [
        "cli calling planner with task: Assess the parser",
        "planner calling coder with task: code for it",
        "planner calling writer with task: docs for it",
        "planner calling stranger with task:",
        "stranger returned: REFUSED (TARGET_NOT_ALLOWED: planner may not send to stranger "
        "(allowed: coder))",
        "coder returned: SUCCESS (174 tokens, 0.1s)",
        "writer returned: FAILED (20 tokens, 1.6s; no docs found)",
        "planner returned: PARTIAL (690 tokens, 2s)",
    ]


def test_calls_shows_tools_used_and_what_is_still_open() -> None:
    call = _call("s", "planner", "reviewer", 0, kind="sub_agent_call", objective="check\n  it")
    answer = _answer("sa", call, 900, tokens=12, duration_ms=0, tools_used=("read", "grep"))
    open_call = _call("o", "planner", "sloth", 5, objective="x" * 300, deadline_at=_at(1500))
    items = interactions(decisions_by_envelope([call, answer, open_call]))
    lines = render_calls(items, now=_at(1000))
    assert lines[0] == "planner calling reviewer with task: check it"
    assert lines[1] == "planner calling sloth with task: " + "x" * 199 + "…"
    assert lines[2:] == [
        "reviewer returned: SUCCESS (12 tokens, 0s)",
        "  Tools used: read, grep",
        "sloth has not answered yet",
    ]
    assert render_calls(items, now=_at(2000))[-1] == (
        "sloth returned: TIMEOUT (no answer within its 1.5s deadline)"
    )


def test_a_session_is_found_through_its_traces() -> None:
    records = _fan_out()
    other = _call("z", "cli", "coder", 0, trace="tr2", session_id="s2")
    everything = [*records, other]
    assert select_records(everything, "s1") == records  # answers name no session
    assert select_records(everything, "tr2") == [other]
    assert select_records(everything, "nothing") == []
