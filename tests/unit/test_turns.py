"""The collaboration turn loop (seed 001 §6), as pure transitions: no bus."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import structs

from actors.router._opening import open_session, refuse_duplicate
from actors.router._session import (
    APPLIED_KEPT,
    CANCEL_NOTICE,
    SINGLE_CANCEL_NOTICE,
    Limits,
    Session,
    Step,
)
from actors.router._turns import advance
from schemas import (
    AgentCall,
    AgentResponse,
    Control,
    Error,
    ErrorCode,
    Handoff,
    HumanMessage,
    Reply,
    SessionEvent,
    derive_id,
)

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
LIMITS = Limits()
FAIRY = "Write a 2-paragraph fairy tale—Claude drafts, GPT edits, alternate until done (≤4 rounds)."


def goal(text: str = FAIRY, **fields: object) -> HumanMessage:
    values: dict[str, object] = {
        "mode": "collaborate",
        "participants": ("gpt", "claude"),
        "first_speaker": "claude",
        "max_rounds": 4,
        "session_id": "s-1",
    }
    values.update(fields)
    return HumanMessage(
        id=f"h-{text[:8]}-{values['session_id']}",
        created_at=T0,
        text=text,
        call_id="c-0",
        **values,  # type: ignore[arg-type]
    )


def calls(step: Step) -> list[AgentCall]:
    return [e for e in step.effects if isinstance(e, AgentCall)]


def events(step: Step) -> list[SessionEvent]:
    return [e for e in step.effects if isinstance(e, SessionEvent)]


def started(msg: HumanMessage | None = None) -> tuple[Session, AgentCall]:
    step = open_session(
        msg or goal(),
        session_id=(msg or goal()).session_id or "s-1",
        sender="cli",
        now=T0,
        limits=LIMITS,
    )
    assert step.session is not None and step.changed
    (call,) = calls(step)
    return step.session, call


def answer(
    call: AgentCall,
    message: str,
    *,
    to: str | None = None,
    final: bool = False,
    malformed: bool = False,
    attempt: int = 1,
    id_: str | None = None,
) -> AgentResponse:
    handoff = Handoff(to=to, task=f"{to}, your turn") if to else None
    reply = (
        Reply(message=message, final=final)
        if handoff is None
        else Reply(message=message, handoff=handoff, final=final)
    )
    return AgentResponse(
        id=id_ or derive_id(call.id, f"answer-{attempt}"),
        created_at=T0,
        sender=call.target,
        text=message,
        call_id=call.call_id,
        session_id=call.session_id,
        round=call.round,
        max_rounds=call.max_rounds,
        reply=reply,
        malformed=malformed,
        attempt=attempt,
    )


def step(
    session: Session,
    envelope: AgentResponse | Error | Control,
    sender: str | None = None,
    *,
    cause: str | None = None,
    operator: bool = False,
) -> Step:
    """Apply `envelope` as the gate delivers it: by default an answer from its agent, an error
    from the gate refusing the pending call, a control from the person who opened the session,
    each caused (`Parley-Causation-Id`) by the call pending now."""
    if sender is None:
        if isinstance(envelope, AgentResponse):
            sender = envelope.sender
        else:
            sender = LIMITS.gate_id if isinstance(envelope, Error) else "cli"
    if cause is None:
        cause = session.pending.envelope_id if session.pending else ""
    return advance(
        session,
        envelope,
        sender=sender,
        now=T0,
        limits=LIMITS,
        cause=cause,
        operator=operator,
        reporter=sender == LIMITS.gate_id,
    )


def end_event(result: Step) -> SessionEvent:
    last = events(result)[-1]
    assert last.event_type in {"session_completed", "session_failed", "session_canceled"}
    return last


# -- opening -------------------------------------------------------------------------


def test_opening_calls_the_first_speaker_with_the_goal_verbatim_at_round_one() -> None:
    result = open_session(goal(), session_id="s-1", sender="cli", now=T0, limits=LIMITS)
    assert [e.event_type for e in events(result)] == [
        "session_created",
        "session_started",
        "step_started",
    ]
    (call,) = calls(result)
    assert (call.target, call.round, call.max_rounds, call.goal) == ("claude", 1, 4, FAIRY)
    assert call.session_id == "s-1" and call.text == FAIRY, "the first task is the goal"
    assert call.id == derive_id(goal().id, "call"), "the id a redelivery re-derives"
    assert result.session is not None and result.session.pending is not None


def test_the_opening_names_how_long_a_call_may_run() -> None:
    """A command joining the session mid-call waits as long as the router lets a call run
    (tools/_session_wait.py): the opening, which the router keeps, names the turn and the
    sweep's margin."""
    limits = Limits(turn_timeout_s=200, stall_margin_s=30)
    result = open_session(goal(), session_id="s-1", sender="cli", now=T0, limits=limits)
    created = events(result)[0]
    assert created.event_type == "session_created"
    assert (created.payload["turn_timeout_s"], created.payload["stall_margin_s"]) == (200, 30)


def test_defaults_are_the_seeds_two_agents_six_rounds_first_participant_first() -> None:
    msg = HumanMessage(id="h", created_at=T0, text="plan a hike", call_id="c", mode="collaborate")
    result = open_session(msg, session_id="s-9", sender="cli", now=T0, limits=LIMITS)
    assert result.session is not None
    assert result.session.participants == ("gpt", "claude")
    assert result.session.max_rounds == 6 and calls(result)[0].target == "gpt"


def test_a_single_call_names_its_agent_with_a_mention() -> None:
    msg = HumanMessage(id="h", created_at=T0, text="@gpt what is NATS?", call_id="c")
    result = open_session(msg, session_id="s-2", sender="cli", now=T0, limits=LIMITS)
    (call,) = calls(result)
    assert (call.target, call.goal, call.max_rounds) == ("gpt", "what is NATS?", 1)


def test_the_router_command_form_starts_a_collaboration() -> None:
    msg = HumanMessage(
        id="h", created_at=T0, text="@router collaborate claude gpt: plan", call_id="c"
    )
    result = open_session(msg, session_id="s-3", sender="cli", now=T0, limits=LIMITS)
    assert result.session is not None and result.session.mode == "collaborate"
    assert result.session.participants == ("claude", "gpt") and calls(result)[0].target == "claude"


def test_unusable_messages_get_an_invalid_request_error_and_open_nothing() -> None:
    bad = [
        HumanMessage(id="h1", created_at=T0, text="no agent named", call_id="c"),
        goal(first_speaker="llama"),
        goal(participants=("gpt", "gpt")),
        goal(session_id="Not.A.Token"),
    ]
    for msg in bad:
        result = open_session(
            msg, session_id=msg.session_id or "s-x", sender="cli", now=T0, limits=LIMITS
        )
        error, *failed = result.effects
        assert isinstance(error, Error) and error.code is ErrorCode.INVALID_REQUEST
        assert error.cause_id == msg.id and result.session is None
        # Whoever follows a nameable session learns why it never started.
        if msg.session_id != "Not.A.Token":
            (event,) = failed
            assert isinstance(event, SessionEvent) and event.event_type == "session_failed"
        else:
            assert not failed


def test_a_second_message_claiming_a_session_id_is_refused() -> None:
    result = refuse_duplicate(goal(), session_id="s-1", sender="cli", now=T0)
    (error,) = result.effects
    assert isinstance(error, Error) and "already in use" in error.message


# -- acceptance A-E --------------------------------------------------------------------


def test_a_context_sharing_each_call_carries_the_others_latest_message() -> None:
    session, call = started()
    draft = step(session, answer(call, "Once upon a time, a fox…", to="gpt"))
    assert draft.session is not None
    (edit_call,) = calls(draft)
    assert edit_call.target == "gpt" and edit_call.round == 2
    texts = [item.text for item in edit_call.transcript]
    assert "Once upon a time, a fox…" in texts and "gpt, your turn" in texts
    assert edit_call.text == "gpt, your turn", "the task is the handoff's"
    edited = step(draft.session, answer(edit_call, "Edited: the fox…", to="claude"))
    assert edited.session is not None
    (final_call,) = calls(edited)
    assert "Edited: the fox…" in [item.text for item in final_call.transcript]
    finished = step(edited.session, answer(final_call, "The end.", final=True))
    assert finished.session is not None
    assert finished.session.stop_reason == "final" and end_event(finished).stop_reason == "final"


def test_b_bounded_rounds_exactly_two_turns_then_cap_reached() -> None:
    session, call = started(goal(max_rounds=2))
    first = step(session, answer(call, "step 1", to="gpt"))
    assert first.session is not None
    (second_call,) = calls(first)
    assert second_call.final_round and second_call.round == second_call.max_rounds
    second = step(first.session, answer(second_call, "step 2", to="claude"))
    assert second.session is not None and not calls(second)
    assert second.session.stop_reason == "cap_reached" and second.session.round == 2
    turns = [i for i in second.session.transcript if i.role in ("gpt", "claude")]
    assert len(turns) == 2


def test_c_handoff_continues_and_final_ends_even_with_a_handoff() -> None:
    session, call = started()
    cont = step(session, answer(call, "draft", to="gpt"))
    assert cont.session is not None and calls(cont) and cont.session.open
    (call2,) = calls(cont)
    done = step(cont.session, answer(call2, "done", to="claude", final=True))
    assert done.session is not None and not calls(done)
    assert done.session.stop_reason == "final"


def test_c_no_handoff_ends_the_session() -> None:
    session, call = started()
    result = step(session, answer(call, "I have nothing to hand over"))
    assert result.session is not None and result.session.stop_reason == "no_handoff"


def test_d_malformed_ends_with_a_warning_and_ignores_the_handoff() -> None:
    session, call = started()
    result = step(session, answer(call, "Sure! Here is prose", to="gpt", malformed=True))
    assert result.session is not None and not calls(result)
    assert result.session.stop_reason == "malformed"
    assert "JSON" in (result.session.warning or "")
    completed = events(result)[0]
    assert completed.payload["handoff"] is None and completed.payload["malformed"] is True
    assert end_event(result).payload["warning"] == result.session.warning


def test_a_handoff_to_a_stranger_ends_naming_it_and_the_peers() -> None:
    session, call = started()
    result = step(session, answer(call, "over to llama", to="llama"))
    assert result.session is not None and result.session.stop_reason == "unknown_peer"
    warning = str(end_event(result).payload["warning"])
    assert "'llama', who is not one of its peers in this session (" in warning, warning


def test_a_stopped_single_call_is_not_called_a_collaboration() -> None:
    """`parley task` and `parley say` printed seed 001's "Collaboration canceled by user." for
    a call of one agent (a newcomer's walk)."""
    session, _ = started(goal(mode="single", participants=("gpt",), first_speaker="gpt"))
    result = step(session, Control(id="stop-1", created_at=T0, action="stop", session_id="s-1"))
    assert result.session is not None and result.session.status == "canceled"
    assert end_event(result).payload["message"] == SINGLE_CANCEL_NOTICE == "Canceled by user."
    assert result.session.transcript[-1].text == SINGLE_CANCEL_NOTICE


def test_e_stop_cancels_with_the_notice_and_a_late_answer_changes_nothing() -> None:
    session, call = started()
    stop = Control(id="stop-1", created_at=T0, action="stop", session_id="s-1")
    result = step(session, stop)
    assert result.session is not None and result.session.status == "canceled"
    end = end_event(result)
    assert end.event_type == "session_canceled" and end.stop_reason == "canceled"
    assert end.payload["message"] == CANCEL_NOTICE
    assert result.session.transcript[-1].text == CANCEL_NOTICE
    late = step(result.session, answer(call, "too late", to="gpt"))
    assert not late.changed and not late.effects
    again = step(
        result.session, Control(id="stop-2", created_at=T0, action="stop", session_id="s-1")
    )
    assert not again.changed and not again.effects


def test_stop_from_another_user_is_refused() -> None:
    session, _ = started(goal(user_id="alice"))
    result = step(
        session, Control(id="x", created_at=T0, action="stop", session_id="s-1", user_id="bob")
    )
    (error,) = result.effects
    assert isinstance(error, Error) and error.code is ErrorCode.USER_MISMATCH
    assert result.session is not None and result.session.open


def test_only_the_principal_that_opened_a_session_or_an_operator_may_stop_it() -> None:
    session, _ = started()
    assert session.opener == "cli"
    stop = Control(id="x", created_at=T0, action="stop", session_id="s-1")
    for stranger in ("alice", "gpt"):
        result = step(session, stop, sender=stranger)
        (error,) = result.effects
        assert isinstance(error, Error) and error.code is ErrorCode.UNAUTHORIZED
        assert f"{stranger} cannot stop a session it did not open" in error.message
        assert "cli" not in error.message
        assert result.session is not None and result.session.open
    by_operator = step(session, stop, sender="ops", operator=True)
    assert by_operator.session is not None and by_operator.session.status == "canceled"


def test_a_session_stored_without_its_opener_is_steered_only_by_an_operator() -> None:
    session, _ = started()
    legacy = structs.replace(session, opener="")
    stop = Control(id="x", created_at=T0, action="stop", session_id="s-1")
    (error,) = step(legacy, stop, sender="cli").effects
    assert isinstance(error, Error) and error.code is ErrorCode.UNAUTHORIZED
    stopped = step(legacy, stop, sender="ops", operator=True).session
    assert stopped is not None and stopped.status == "canceled"


def test_unsupported_controls_are_refused_not_ignored() -> None:
    session, _ = started()
    result = step(session, Control(id="p", created_at=T0, action="approve", session_id="s-1"))
    (error,) = result.effects
    assert isinstance(error, Error) and error.code is ErrorCode.INVALID_REQUEST


def test_single_call_is_answered_once_and_ignores_a_handoff() -> None:
    msg = HumanMessage(id="h", created_at=T0, text="@gpt hi", call_id="c", session_id="s-5")
    session, call = started(msg)
    result = step(session, answer(call, "hello", to="claude"))
    assert result.session is not None and result.session.stop_reason == "answered"
    assert not calls(result)


# -- errors, retries, late and duplicate answers ------------------------------------------


def _refusal(call: AgentCall, *, retryable: bool, id_: str) -> Error:
    return Error(
        id=id_,
        created_at=T0,
        code=ErrorCode.AGENT_UNAVAILABLE,
        message="agent gpt is not running",
        retryable=retryable,
        cause_id=call.id,
    )


def test_a_retryable_error_re_calls_the_agent_then_fails_the_session() -> None:
    session, call = started()
    retried = step(session, _refusal(call, retryable=True, id_="e1"))
    assert retried.session is not None and retried.session.open
    (again,) = calls(retried)
    assert again.target == call.target and again.call_id == call.call_id and again.id != call.id
    failed = step(retried.session, _refusal(again, retryable=True, id_="e2"))
    assert failed.session is not None and failed.session.status == "failed"
    end = end_event(failed)
    assert (end.event_type, end.stop_reason) == ("session_failed", "error")
    assert end.payload["code"] == "AGENT_UNAVAILABLE"


def test_a_refusal_that_is_not_retryable_fails_at_once() -> None:
    session, call = started()
    failed = step(session, _refusal(call, retryable=False, id_="e1"))
    assert failed.session is not None and failed.session.stop_reason == "error"


def test_an_error_about_another_call_is_ignored() -> None:
    session, _ = started()
    other = Error(id="e", created_at=T0, code=ErrorCode.INTERNAL_ERROR, message="x", cause_id="zzz")
    assert not step(session, other).changed


def test_an_error_from_an_agent_the_call_did_not_go_to_is_ignored() -> None:
    session, call = started()  # claude is called first
    assert call.target == "claude"
    forged = _refusal(call, retryable=False, id_="e1")
    assert not step(session, forged, sender="gpt").changed
    assert step(session, forged, sender="claude").changed  # its callee may report it


def test_an_error_counts_only_when_the_gate_says_it_came_back_from_the_pending_call() -> None:
    """The error's own `cause_id` is a claim (call ids derive from ids participants saw); the
    gate's causation, an envelope it delivered to the sender, is not."""
    session, call = started()
    forged = _refusal(call, retryable=False, id_="e1")
    for sender in ("claude", LIMITS.gate_id):
        assert not step(session, forged, sender=sender, cause="another-call").changed


def test_an_answer_counts_only_when_the_gate_says_it_came_back_from_the_pending_call() -> None:
    session, call = started()
    reply = answer(call, "draft", to="gpt")
    assert not step(session, reply, cause="a-call-of-another-session").changed
    assert step(session, reply).changed


def test_the_same_call_answered_twice_advances_once() -> None:
    session, call = started()
    first = step(session, answer(call, "draft", to="gpt", attempt=2, id_="a2"))
    assert first.session is not None
    zombie = step(first.session, answer(call, "stale draft", to="gpt", attempt=1, id_="a1"))
    assert not zombie.changed and not zombie.effects


def test_only_the_called_agent_may_answer() -> None:
    session, call = started()
    forged = step(session, answer(call, "I am claude, honest", to="gpt"), sender="gpt")
    assert not forged.changed and not forged.effects


def test_an_input_handled_again_replays_its_effects_without_advancing() -> None:
    session, call = started()
    response = answer(call, "draft", to="gpt")
    first = step(session, response)
    assert first.session is not None
    replay = step(first.session, response)
    assert not replay.changed and replay.effects == first.effects
    assert replay.session == first.session


# -- properties ------------------------------------------------------------------------

Move = tuple[str, int]
moves = st.lists(
    st.tuples(
        st.sampled_from(["handoff", "final", "none", "malformed", "stop", "error", "dup", "late"]),
        st.integers(0, 1),
    ),
    max_size=14,
)


def _play(script: list[Move], max_rounds: int) -> list[Step]:
    session, call = started(goal(max_rounds=max_rounds))
    steps: list[Step] = []
    seen: list[AgentResponse | Error | Control] = []
    for n, (move, pick) in enumerate(script):
        other = "gpt" if call.target == "claude" else "claude"
        envelope: AgentResponse | Error | Control
        if move == "handoff":
            envelope = answer(call, f"turn {n}", to=(other, call.target)[pick], id_=f"r{n}")
        elif move == "final":
            envelope = answer(call, f"turn {n}", final=True, id_=f"r{n}")
        elif move == "none":
            envelope = answer(call, f"turn {n}", id_=f"r{n}")
        elif move == "malformed":
            envelope = answer(call, f"turn {n}", to=other, malformed=True, id_=f"r{n}")
        elif move == "stop":
            envelope = Control(id=f"s{n}", created_at=T0, action="stop", session_id="s-1")
        elif move == "error":
            envelope = _refusal(call, retryable=bool(pick), id_=f"e{n}")
        elif move == "dup" and seen:
            envelope = seen[pick % len(seen)]
        else:  # a late answer to a call that is not pending
            envelope = structs.replace(
                answer(call, "late", to=other, id_=f"late{n}"), call_id=f"old-{n}"
            )
        seen.append(envelope)
        result = step(session, envelope)
        steps.append(result)
        if result.session is not None:
            session = result.session
        new_calls = calls(result) if result.changed else []
        if new_calls:
            call = new_calls[-1]
    return steps


@settings(max_examples=300, deadline=None)
@given(script=moves, max_rounds=st.integers(1, 6))
def test_any_sequence_keeps_the_loop_guard(script: list[Move], max_rounds: int) -> None:
    steps = _play(script, max_rounds)
    ended = False
    for result in steps:
        if ended:
            # After the end, nothing new happens: only replays of recorded effects.
            assert not result.changed
            assert not calls(result) or result.note == "replayed"
        session = result.session
        assert session is not None
        assert 1 <= session.round <= max_rounds
        for call in calls(result):
            assert call.round <= max_rounds
            assert call.final_round == (call.round == max_rounds)
        if not session.open:
            ended = True
            assert session.pending is None and session.stop_reason is not None
    assert _play(script, max_rounds) == steps, "transitions are deterministic"


@settings(max_examples=200, deadline=None)
@given(script=moves, max_rounds=st.integers(1, 6), data=st.data())
def test_an_input_handled_again_after_a_crash_gets_its_first_effects_back(
    script: list[Move], max_rounds: int, data: st.DataObject
) -> None:
    """A router that stored a transition and died before acking its input handles that input
    again from the stored state: it must re-publish exactly what it published the first time,
    and store nothing new, for any input among the last APPLIED_KEPT that changed the session.
    """
    session, call = started(goal(max_rounds=max_rounds))
    applied: list[tuple[AgentResponse | Error | Control, Step]] = []
    for n, (move, pick) in enumerate(script):
        if not session.open:
            break
        other = "gpt" if call.target == "claude" else "claude"
        envelope: AgentResponse | Error | Control
        if move in ("handoff", "dup", "late"):
            envelope = answer(call, f"turn {n}", to=(other, call.target)[pick], id_=f"r{n}")
        elif move == "final":
            envelope = answer(call, f"turn {n}", final=True, id_=f"r{n}")
        elif move == "stop":
            envelope = Control(id=f"s{n}", created_at=T0, action="stop", session_id="s-1")
        elif move == "error":
            envelope = _refusal(call, retryable=bool(pick), id_=f"e{n}")
        else:
            envelope = answer(call, f"turn {n}", malformed=move == "malformed", id_=f"r{n}")
        result = step(session, envelope)
        if result.changed:
            assert result.session is not None
            applied.append((envelope, result))
            session = result.session
            call = next(iter(calls(result)), call)
    recent = applied[-APPLIED_KEPT:]
    if not recent:
        return
    envelope, first = data.draw(st.sampled_from(recent))
    again = step(session, envelope)
    assert not again.changed and again.effects == first.effects
