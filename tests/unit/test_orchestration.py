"""Seed 000's orchestrated session as pure transitions (actors/orchestrator): every state,
every control, the limits, and the bounded history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from actors.orchestrator import (
    SUMMARY_NAME,
    OrchestratedSession,
    OrchestrationOptions,
    Reminder,
    Step,
    Turn,
    advance_orchestration,
    bound_history,
    local_prompt,
    open_orchestration,
    review_reasons,
)
from schemas import (
    AgentCall,
    AgentResponse,
    Control,
    Error,
    ErrorCode,
    HumanMessage,
    Orchestration,
    Reply,
    SessionEvent,
    TokenUsage,
    new_id,
)

NOW = datetime(2026, 11, 25, 3, 0, tzinfo=UTC)
OPTIONS = OrchestrationOptions()
OWNER = "cli"


def opened(mode: str = "manual", options: OrchestrationOptions = OPTIONS, **limits: Any) -> Step:
    msg = HumanMessage(
        id=new_id(),
        created_at=NOW,
        text="review this API for security issues",
        call_id=new_id(),
        mode="orchestrate",
        orchestration=Orchestration(
            local_agent="local",
            shared_agent="byte-doc",
            mode=mode,  # type: ignore[arg-type]
            **limits,
        ),
        session_id="s1",
    )
    return open_orchestration(msg, session_id="s1", sender=OWNER, now=NOW, options=options)


def session_of(step: Step) -> OrchestratedSession:
    assert step.session is not None
    return step.session


def calls(step: Step) -> list[AgentCall]:
    return [e for e in step.effects if isinstance(e, AgentCall)]


def events(step: Step) -> list[SessionEvent]:
    return [e for e in step.effects if isinstance(e, SessionEvent)]


def kinds(step: Step) -> list[str]:
    return [e.event_type for e in events(step)]


def refusals(step: Step) -> list[Error]:
    return [e for e in step.effects if isinstance(e, Error)]


def answer(
    session: OrchestratedSession,
    text: str,
    *,
    final: bool = False,
    tokens: int = 0,
    now: datetime = NOW,
    options: OrchestrationOptions = OPTIONS,
    tools_used: tuple[str, ...] = (),
) -> Step:
    pending = session.pending
    assert pending is not None
    response = AgentResponse(
        id=new_id(),
        created_at=now,
        sender=pending.target,
        text=text,
        call_id=pending.call_id,
        session_id=session.session_id,
        reply=Reply(message=text, final=final),
        token_usage=TokenUsage(total=tokens),
        tools_used=tools_used,
    )
    return advance_orchestration(
        session,
        response,
        sender=pending.target,
        now=now,
        options=options,
        cause=pending.envelope_id,
    )


def control(
    session: OrchestratedSession,
    action: str,
    *,
    sender: str = OWNER,
    operator: bool = False,
    now: datetime = NOW,
    **fields: Any,
) -> Step:
    envelope = Control(
        id=new_id(),
        created_at=now,
        action=action,  # type: ignore[arg-type]
        session_id=session.session_id,
        **fields,
    )
    return advance_orchestration(
        session, envelope, sender=sender, now=now, options=OPTIONS, operator=operator
    )


def failure(
    session: OrchestratedSession,
    *,
    retryable: bool = True,
    code: ErrorCode = ErrorCode.INTERNAL_ERROR,
    reporter: bool = False,
) -> Step:
    pending = session.pending
    assert pending is not None
    error = Error(
        id=new_id(),
        created_at=NOW,
        code=code,
        message="it broke",
        retryable=retryable,
        cause_id=pending.envelope_id,
    )
    sender = "router" if reporter else pending.target
    return advance_orchestration(
        session,
        error,
        sender=sender,
        now=NOW,
        options=OPTIONS,
        cause=pending.envelope_id,
        reporter=reporter,
    )


def drafted(mode: str = "manual", **limits: Any) -> Step:
    return answer(session_of(opened(mode, **limits)), "Draft one: how are tokens checked?")


# -- opening ------------------------------------------------------------------------


def test_opening_passes_idle_and_planning_and_asks_the_local_agent() -> None:
    step = opened()
    session = session_of(step)
    assert session.state == "waiting_local" and session.turn_index == 1
    assert kinds(step) == ["session_created", "session_started", "step_started"]
    [call] = calls(step)
    assert call.target == "local" and call.goal == session.objective and call.text == call.goal
    assert session.pending is not None and session.pending.phase == "local"
    [reminder] = [e for e in step.effects if isinstance(e, Reminder)]
    assert reminder.error.details["deadline"] == (NOW + timedelta(minutes=10)).isoformat()
    assert session.max_turns == 8 and session.max_failures == 3 and session.mode == "manual"


@pytest.mark.parametrize(
    ("orchestration", "why"),
    [
        (None, "names its agents"),
        (Orchestration(local_agent="local", shared_agent="local"), "itself"),
    ],
)
def test_an_unusable_opening_is_refused(orchestration: Orchestration | None, why: str) -> None:
    msg = HumanMessage(
        id=new_id(),
        created_at=NOW,
        text="x",
        call_id=new_id(),
        mode="orchestrate",
        orchestration=orchestration,
    )
    step = open_orchestration(msg, session_id="s1", sender=OWNER, now=NOW, options=OPTIONS)
    assert step.session is None
    [error] = refusals(step)
    assert error.code == ErrorCode.INVALID_REQUEST and why in error.message
    [failed] = events(step)  # whoever follows the session sees it end
    assert failed.event_type == "session_failed" and why in failed.payload["reason"]


# -- the loop -------------------------------------------------------------------------


def test_full_auto_loops_draft_send_answer_follow_up_until_max_turns() -> None:
    step = opened("full_auto", max_turns=3)
    sent: list[str] = []
    local_texts: list[str] = []
    for turn in range(1, 4):
        session = session_of(step)
        assert session.state == "waiting_local" and session.turn_index == turn
        step = answer(session, f"draft {turn}")
        [send] = calls(step)
        assert send.target == "byte-doc" and send.text == f"draft {turn}"
        assert session_of(step).state == "waiting_remote"
        assert events(step)[-1].payload["sent_by"] == "auto"
        sent.append(send.text)
        step = answer(session_of(step), f"answer {turn}")
        local_texts += [c.text for c in calls(step)]
    session = session_of(step)
    assert sent == ["draft 1", "draft 2", "draft 3"]
    assert local_texts == ["answer 1", "answer 2"]  # the remote answer, verbatim, as context
    assert session.state == "completed" and session.stop_reason == "max_turns"
    assert "maxTurns is 3" in session.reason and session.pending is None


def test_the_remote_answer_comes_back_to_the_local_agent_with_the_history() -> None:
    step = answer(session_of(drafted("full_auto")), "Tokens are JWTs signed with HS256.")
    [follow_up] = calls(step)
    assert follow_up.target == "local" and follow_up.round == 2
    assert follow_up.text == "Tokens are JWTs signed with HS256."
    assert [(t.name, t.text) for t in follow_up.transcript] == [
        ("local", "Draft one: how are tokens checked?")
    ]


def test_the_local_agent_saying_final_completes_the_session_without_sending() -> None:
    step = answer(session_of(opened("full_auto")), "Nothing left to ask.", final=True)
    assert calls(step) == []
    assert session_of(step).state == "completed"
    assert session_of(step).stop_reason == "objective_met"


# -- manual mode: approve, edit, reject ------------------------------------------------


def test_manual_mode_waits_for_approval_before_each_send() -> None:
    step = drafted()
    session = session_of(step)
    assert calls(step) == [] and session.state == "ready_to_send"
    assert kinds(step) == ["step_completed", "approval_requested"]
    approval = session.waiting_approval
    assert approval is not None and approval.draft == "Draft one: how are tokens checked?"
    step = control(session, "approve", approval_id=approval.approval_id, user_id="")
    [send] = calls(step)
    assert send.target == "byte-doc" and send.text == approval.draft
    resolved = session_of(step).approvals[-1]
    assert resolved.decision == "approved" and resolved.resolved_by == OWNER
    assert resolved.resolved_at == NOW and resolved.text == approval.draft
    told = events(step)[0]
    assert told.event_type == "approval_resolved" and told.payload["resolved_by"] == OWNER
    # the next draft waits again
    step = answer(session_of(answer(session_of(step), "an answer")), "Draft two")
    assert calls(step) == [] and session_of(step).state == "ready_to_send"


def test_edit_and_approve_sends_the_owners_text() -> None:
    session = session_of(drafted())
    approval = session.waiting_approval
    assert approval is not None
    step = control(session, "approve", approval_id=approval.approval_id, text="My edit.")
    [send] = calls(step)
    assert send.text == "My edit."
    assert session_of(step).approvals[-1].decision == "edited"
    assert session_of(step).turns[-1].sent_by == "edited"


def test_reject_asks_the_local_agent_again_with_the_reason() -> None:
    session = session_of(drafted())
    approval = session.waiting_approval
    assert approval is not None
    step = control(session, "reject", approval_id=approval.approval_id, reason="too vague")
    [again] = calls(step)
    assert again.target == "local" and again.call_id != approval.approval_id
    assert "too vague" in again.transcript[-1].text
    assert session_of(step).approvals[-1].decision == "rejected"
    assert session_of(step).state == "waiting_local"


def test_a_stale_or_missing_approval_is_refused() -> None:
    session = session_of(drafted())
    [error] = refusals(control(session, "approve", approval_id="not-it"))
    assert error.code == ErrorCode.INVALID_REQUEST
    [error] = refusals(control(session_of(opened()), "approve"))
    assert "no draft awaits approval" in error.message


# -- semi_auto ------------------------------------------------------------------------


def test_semi_auto_sends_clean_drafts_and_holds_risky_ones() -> None:
    assert len(calls(drafted("semi_auto"))) == 1
    session = session_of(opened("semi_auto"))
    step = answer(session, "Use key AKIAIOSFODNN7EXAMPLE to log in.")
    assert calls(step) == [] and session_of(step).state == "ready_to_send"
    [asked] = [e for e in events(step) if e.event_type == "approval_requested"]
    assert "secret" in asked.payload["reasons"][0]
    step = answer(session, "x" * 2500)
    assert calls(step) == [] and "2500 characters" in events(step)[-1].payload["reasons"][0]


def test_risk_rules_are_configurable() -> None:
    relaxed = OrchestrationOptions(review_over_chars=None, review_secrets=False, review_pii=False)
    assert review_reasons("x" * 5000 + " AKIAIOSFODNN7EXAMPLE", relaxed) == ()
    assert review_reasons("mail me at ann@example.com", OPTIONS)


def test_semi_auto_holds_a_draft_whose_turn_used_tools_and_names_them() -> None:
    session = session_of(opened("semi_auto"))
    tools = ("delegate_to_agent", "call_sub_agent")
    step = answer(session, "A clean, short draft.", tools_used=tools)
    assert calls(step) == [] and session_of(step).state == "ready_to_send"
    drafted_event, asked = events(step)
    assert drafted_event.payload["tools_used"] == list(tools)
    assert asked.event_type == "approval_requested"
    assert asked.payload["reasons"] == [
        "the local agent used tools to write it (delegate_to_agent, call_sub_agent)"
    ]
    [approval] = session_of(step).approvals
    assert approval.reasons == tuple(asked.payload["reasons"])
    step = control(session_of(step), "approve", approval_id=approval.approval_id)
    [send] = calls(step)
    assert send.target == "byte-doc" and send.text == "A clean, short draft."
    # The next draft, written without tools, leaves unreviewed: the rule is per draft.
    step = answer(session_of(answer(session_of(step), "Tokens are checked.")), "Next question?")
    assert [c.target for c in calls(step)] == ["byte-doc"]


def test_a_tool_using_draft_held_by_a_pause_is_still_reviewed_on_resume() -> None:
    paused = session_of(control(session_of(opened("semi_auto")), "pause"))
    step = answer(paused, "A draft.", tools_used=("delegate_to_agent",))
    assert calls(step) == [] and session_of(step).state == "paused"
    step = control(session_of(step), "resume")
    assert calls(step) == [] and "approval_requested" in kinds(step)


def test_the_tool_use_rule_is_configurable_and_only_semi_auto_applies_it() -> None:
    relaxed = OrchestrationOptions(review_tool_use=False)
    assert review_reasons("A draft.", relaxed, ("delegate_to_agent",)) == ()
    assert review_reasons("A draft.", OPTIONS, ("delegate_to_agent",))
    assert review_reasons("A draft.", OPTIONS, ()) == ()
    session = session_of(opened("semi_auto", relaxed))
    step = answer(session, "A draft.", tools_used=("delegate_to_agent",), options=relaxed)
    assert len(calls(step)) == 1
    step = answer(session_of(opened("full_auto")), "A draft.", tools_used=("call_sub_agent",))
    assert len(calls(step)) == 1


# -- controls -------------------------------------------------------------------------


def test_only_the_owner_or_an_operator_steers() -> None:
    session = session_of(opened())
    [error] = refusals(control(session, "stop", sender="mallory"))
    assert error.code == ErrorCode.UNAUTHORIZED
    assert error.message == "mallory cannot stop a session it did not open"  # names no opener
    assert session_of(control(session, "stop", sender="ops", operator=True)).state == "stopped"


def test_pause_is_immediate_a_draft_arriving_later_is_not_sent_until_resume() -> None:
    step = control(session_of(opened("full_auto")), "pause")
    assert session_of(step).state == "paused" and kinds(step) == ["session_paused"]
    step = answer(session_of(step), "a draft")
    assert calls(step) == [] and session_of(step).state == "paused"
    step = control(session_of(step), "resume")
    assert kinds(step)[0] == "session_resumed"
    [send] = calls(step)
    assert send.target == "byte-doc" and session_of(step).state == "waiting_remote"


def test_pause_while_the_remote_answers_holds_the_next_draft_request() -> None:
    session = session_of(drafted("full_auto"))
    step = answer(session_of(control(session, "pause")), "remote answer")
    assert calls(step) == [] and session_of(step).resume_to == "processing_remote"
    step = control(session_of(step), "resume")
    [ask] = calls(step)
    assert ask.target == "local" and ask.text == "remote answer"


def test_resume_and_pause_out_of_place() -> None:
    session = session_of(opened())
    assert refusals(control(session, "resume"))
    paused = session_of(control(session, "pause"))
    again = control(paused, "pause")
    assert not again.changed
    assert refusals(control(paused, "take_over", text="hi"))
    assert session_of(control(paused, "resume")).state == "waiting_local"


def test_stop_ends_the_session_and_late_answers_are_ignored() -> None:
    session = session_of(opened())
    step = control(session, "stop", reason="enough")
    stopped = session_of(step)
    assert stopped.state == "stopped" and "enough" in stopped.reason
    assert kinds(step) == ["session_canceled"]
    response = AgentResponse(
        id=new_id(),
        created_at=NOW,
        sender="local",
        text="late",
        call_id=session.pending.call_id if session.pending else "",
        session_id="s1",
        reply=Reply(message="late"),
    )
    late = advance_orchestration(stopped, response, sender="local", now=NOW, options=OPTIONS)
    assert not late.changed and late.effects == ()
    assert not control(stopped, "stop").changed
    assert refusals(control(stopped, "pause"))


def test_take_over_sends_the_owners_message_and_switches_to_manual() -> None:
    session = session_of(opened("full_auto"))
    step = control(session, "take_over", text="Do you rotate keys?")
    [send] = calls(step)
    assert send.target == "byte-doc" and send.text == "Do you rotate keys?"
    taken = session_of(step)
    assert taken.mode == "manual" and taken.turns[-1].sent_by == "you"
    assert taken.turns[-1].role == "user"
    assert refusals(control(taken, "take_over", text="again"))  # remote still answering
    assert refusals(control(session, "take_over"))  # no text
    # the abandoned draft's answer no longer counts
    abandoned = session.pending
    assert abandoned is not None
    old = AgentResponse(
        id=new_id(),
        created_at=NOW,
        sender="local",
        text="old draft",
        call_id=abandoned.call_id,
        session_id="s1",
        reply=Reply(message="old draft"),
    )
    late = advance_orchestration(
        taken, old, sender="local", now=NOW, options=OPTIONS, cause=abandoned.envelope_id
    )
    assert not late.changed


def test_take_over_replaces_a_draft_awaiting_approval() -> None:
    session = session_of(drafted())
    step = control(session, "take_over", text="Mine instead.")
    assert session_of(step).approvals[-1].decision == "taken_over"
    assert calls(step)[0].text == "Mine instead."


# -- failures and limits --------------------------------------------------------------


def test_a_retryable_failure_retries_the_same_call_until_max_failures() -> None:
    session = session_of(opened(max_failures=3))
    first = session.pending
    step = failure(session)
    [retry] = calls(step)
    assert first is not None and retry.call_id == first.call_id and retry.id != first.envelope_id
    step = failure(session_of(step))
    assert len(calls(step)) == 1
    step = failure(session_of(step))
    ended = session_of(step)
    assert ended.state == "error" and ended.stop_reason == "max_failures"
    assert "3 consecutive failures" in ended.reason


def test_an_answer_resets_the_consecutive_failures() -> None:
    session = session_of(failure(session_of(opened("full_auto"))))
    assert session.failures == 1
    assert session_of(answer(session, "draft")).failures == 0


def test_a_local_agent_judged_gone_ends_the_session_in_error_with_a_reason() -> None:
    step = failure(
        session_of(opened()), retryable=False, code=ErrorCode.AGENT_UNAVAILABLE, reporter=True
    )
    ended = session_of(step)
    assert ended.state == "error" and ended.stop_reason == "local_failed"
    assert "local agent local failed: AGENT_UNAVAILABLE" in ended.reason
    assert kinds(step) == ["step_completed", "session_failed"]


def test_an_error_from_someone_not_called_is_ignored() -> None:
    session = session_of(opened())
    pending = session.pending
    assert pending is not None
    error = Error(
        id=new_id(),
        created_at=NOW,
        code=ErrorCode.INTERNAL_ERROR,
        message="x",
        cause_id=pending.envelope_id,
    )
    step = advance_orchestration(
        session, error, sender="byte-doc", now=NOW, options=OPTIONS, cause=pending.envelope_id
    )
    assert not step.changed


def test_max_duration_ends_the_session_on_the_reminder_or_any_later_input() -> None:
    step = opened()
    session = session_of(step)
    [reminder] = [e for e in step.effects if isinstance(e, Reminder)]
    early = advance_orchestration(
        session, reminder.error, sender="router", now=NOW, options=OPTIONS, reporter=True
    )
    assert not early.changed
    late = NOW + timedelta(minutes=10)
    step = advance_orchestration(
        session, reminder.error, sender="router", now=late, options=OPTIONS, reporter=True
    )
    assert session_of(step).stop_reason == "max_duration"
    assert "maxDurationMs is 600000 (10 min)" in session_of(step).reason
    assert session_of(answer(session, "draft", now=late)).stop_reason == "max_duration"


def test_the_token_budget_ends_the_run() -> None:
    step = answer(session_of(opened("full_auto", max_tokens_budget=100)), "draft", tokens=150)
    assert calls(step) == []
    assert session_of(step).stop_reason == "max_tokens"
    assert "150 tokens used" in session_of(step).reason


def test_late_duplicate_and_forged_answers_never_advance() -> None:
    session = session_of(opened("full_auto"))
    pending = session.pending
    assert pending is not None
    forged = AgentResponse(
        id=new_id(),
        created_at=NOW,
        sender="byte-doc",
        text="x",
        call_id=pending.call_id,
        session_id="s1",
        reply=Reply(message="x"),
    )
    wrong_sender = advance_orchestration(
        session, forged, sender="byte-doc", now=NOW, options=OPTIONS, cause=pending.envelope_id
    )
    wrong_cause = advance_orchestration(
        session, forged, sender="local", now=NOW, options=OPTIONS, cause="other"
    )
    assert not wrong_sender.changed and not wrong_cause.changed


def test_an_input_applied_again_replays_its_effects() -> None:
    session = session_of(opened("full_auto"))
    pending = session.pending
    assert pending is not None
    response = AgentResponse(
        id=new_id(),
        created_at=NOW,
        sender="local",
        text="d",
        call_id=pending.call_id,
        session_id="s1",
        reply=Reply(message="d"),
    )
    first = advance_orchestration(
        session, response, sender="local", now=NOW, options=OPTIONS, cause=pending.envelope_id
    )
    again = advance_orchestration(
        session_of(first),
        response,
        sender="local",
        now=NOW + timedelta(seconds=5),
        options=OPTIONS,
        cause=pending.envelope_id,
    )
    assert not again.changed and again.effects == first.effects


# -- history bounding -----------------------------------------------------------------


def _turns(count: int, size: int = 10) -> list[Turn]:
    roles = ("local_agent", "remote_agent")
    return [
        Turn(role=roles[i % 2], name="x", text=f"{i:03d}" + "y" * (size - 3), turn_index=i // 2)  # type: ignore[arg-type]
        for i in range(count)
    ]


@pytest.mark.parametrize(("count", "size"), [(0, 10), (3, 10), (20, 10), (20, 5000), (4, 30000)])
def test_history_stays_within_its_bounds_and_summarises_deterministically(
    count: int, size: int
) -> None:
    turns = _turns(count, size)
    kept, summary = bound_history(turns, max_turns=6, max_chars=24000, summary_chars=1000)
    assert len(kept) <= 6 and sum(len(t.text) for t in kept) <= 24000
    assert list(kept) == turns[len(turns) - len(kept) :]  # the most recent, whole
    dropped = len(turns) - len(kept)
    assert (summary is None) == (dropped == 0)
    if summary is not None:
        assert summary.startswith(f"{dropped} earlier turn(s): ") and len(summary) <= 1000
        assert (summary, kept) == (
            bound_history(turns, max_turns=6, max_chars=24000, summary_chars=1000)[1],
            kept,
        )


def test_a_long_run_prompts_with_bounded_history_and_the_latest_remote_message_verbatim() -> None:
    options = OrchestrationOptions(max_history_turns=4, max_history_chars=500)
    step = opened("full_auto", options=options, max_turns=20)
    for turn in range(1, 8):
        step = answer(session_of(step), f"draft {turn} " + "d" * 100, options=options)
        step = answer(session_of(step), f"answer {turn} " + "a" * 300, options=options)
    [ask] = calls(step)
    assert ask.text.startswith("answer 7 ")
    assert ask.transcript[0].name == SUMMARY_NAME
    history = ask.transcript[1:]
    assert len(history) <= 4 and sum(len(i.text) for i in history) <= 500
    remote, items, summary = local_prompt(session_of(step), options)
    assert remote == ask.text and items == ask.transcript and summary == ask.transcript[0].text


# -- audit ----------------------------------------------------------------------------


def test_an_approval_is_audited_with_who_when_what_and_seed_000s_fields() -> None:
    from actors.auditor._facts import FactSource, Redactor, records_for

    session = session_of(drafted())
    approval = session.waiting_approval
    assert approval is not None
    later = NOW + timedelta(seconds=4)
    step = control(
        session,
        "approve",
        approval_id=approval.approval_id,
        text="Send AKIAIOSFODNN7EXAMPLE",
        now=later,
    )
    resolved = events(step)[0]
    source = FactSource("PARLEY_EVENTS", 9, "trace-1", 0, "cause-1", "router", later)
    [record] = records_for(resolved, source, tenant="demo", redactor=Redactor(key=b"k"))
    assert (record.profile, record.requester, record.status) == (OWNER, OWNER, "approval_resolved")
    assert (record.target_device_id, record.mode, record.turn_index) == ("byte-doc", "manual", 1)
    assert record.duration_ms == 4000 and record.created_at == later
    assert record.task.startswith("edited: Send ") and "AKIAIOSFODNN7EXAMPLE" not in record.task


def test_the_gates_refusal_of_a_send_is_told_as_a_refusal_not_an_agents_failure() -> None:
    """full_auto sends the draft; the gate refuses the router's call to the shared agent:
    the failure says the gate refused it, by which rule, and the ending says so too."""
    session = session_of(answer(session_of(opened("full_auto")), "Draft one"))
    pending = session.pending
    assert pending is not None and pending.phase == "remote"
    refusal = Error(
        id=new_id(),
        created_at=NOW,
        code=ErrorCode.TARGET_NOT_ALLOWED,
        message="router may not send to byte-doc (allowed: local)",
        details={"rule": "allowed_targets"},
        cause_id=pending.envelope_id,
    )
    step = advance_orchestration(
        session,
        refusal,
        sender="gate",
        now=NOW,
        options=OPTIONS,
        cause=pending.envelope_id,
        reporter=True,
    )
    failed, ended = events(step)
    assert failed.payload["refused_by"] == "gate"
    assert failed.payload["rule"] == "allowed_targets"
    assert ended.event_type == "session_failed"
    assert ended.payload["reason"] == (
        "the gate refused the call to the shared agent byte-doc: "
        "router may not send to byte-doc (allowed: local)"
    )


def test_pause_resume_and_stop_say_who_did_it() -> None:
    session = session_of(drafted())
    paused = control(session, "pause")
    assert events(paused)[0].payload["by"] == OWNER
    resumed = control(session_of(paused), "resume")
    assert events(resumed)[0].payload["by"] == OWNER
    stopped = control(session_of(resumed), "stop", reason="Stop pressed")
    [ending] = events(stopped)
    assert (ending.payload["by"], ending.payload["note"]) == (OWNER, "Stop pressed")
