"""The two calls of a turn: the local agent's draft request and the send to the shared agent.

The local agent is asked with seed 000's local prompt frame as an `agent_call`'s fields (the
agent host's subprocess brain turns them into the `desktop.local_prompt.request` frame, a
hosted model's into its prompt): `goal` is the objective, `text` the latest remote message
verbatim (the objective itself on the first turn), and `transcript` the bounded history, led
by the `history_summary` of dropped turns (an item named `history_summary`) and, after a
rejection, the owner's reason (an item from `user`). The shared agent is sent only the
outbound message and the conversation it has been part of, never the objective: that is the
person's instruction to their own agent.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from msgspec import structs

from actors.orchestrator._events import TransitionClock
from actors.orchestrator._history import bound_history
from actors.orchestrator._options import OrchestrationOptions
from actors.orchestrator._state import Effect, OrchestratedSession, PendingCall, Role, SentBy, Turn
from schemas import HISTORY_SUMMARY, AgentCall, TranscriptItem, derive_id

__all__ = ("SUMMARY_NAME", "ask_local", "local_prompt", "send_remote")

SUMMARY_NAME: Final = HISTORY_SUMMARY


def _item(turn: Turn, session: OrchestratedSession) -> TranscriptItem:
    name = {
        "local_agent": session.local_agent,
        "remote_agent": session.shared_agent,
        "user": session.opener or "user",
    }[turn.role]
    return TranscriptItem(role="user" if turn.role == "user" else name, name=name, text=turn.text)


def local_prompt(
    session: OrchestratedSession, options: OrchestrationOptions
) -> tuple[str, tuple[TranscriptItem, ...], str | None]:
    """(remote message verbatim, bounded history as transcript items, history summary)."""
    turns = session.turns
    latest_remote = turns[-1] if turns and turns[-1].role == "remote_agent" else None
    earlier = turns[:-1] if latest_remote is not None else turns
    kept, summary = bound_history(
        earlier,
        max_turns=options.max_history_turns,
        max_chars=options.max_history_chars,
        summary_chars=options.summary_chars,
    )
    items = [_item(turn, session) for turn in kept]
    if summary is not None:
        items.insert(0, TranscriptItem(role="router", name=SUMMARY_NAME, text=summary))
    if session.feedback:
        why = f"The owner rejected your last draft: {session.feedback}"
        items.append(TranscriptItem(role="user", name=session.opener or "user", text=why))
    remote = latest_remote.text if latest_remote is not None else ""
    return remote, tuple(items), summary


def ask_local(
    session: OrchestratedSession,
    clock: TransitionClock,
    options: OrchestrationOptions,
    *,
    attempts: int = 1,
) -> tuple[OrchestratedSession, tuple[Effect, ...]]:
    """Ask the local agent for the turn's draft: `planning` -> `waiting_local`."""
    session = structs.replace(session, state="planning")
    remote, history, summary = local_prompt(session, options)
    drafts = session.drafts if attempts > 1 else session.drafts + 1
    call_id = derive_id(session.session_id, f"draft-{drafts}")
    call = AgentCall(
        id=clock.id(f"local-{attempts}"),
        created_at=clock.now,
        target=session.local_agent,
        thread=session.thread,
        text=remote or session.objective,
        call_id=call_id,
        session_id=session.session_id,
        round=session.turn_index,
        max_rounds=session.max_turns,
        goal=session.objective,
        transcript=history,
        user_id=session.user_id,
    )
    deadline = clock.now + timedelta(seconds=options.turn_timeout_s)
    pending = PendingCall(
        call_id=call_id,
        envelope_id=call.id,
        target=session.local_agent,
        phase="local",
        attempts=attempts,
        sent_at=clock.now,
        deadline=deadline,
    )
    session = structs.replace(
        session, state="waiting_local", pending=pending, drafts=drafts, draft="", draft_tools=()
    )
    event = clock.event(
        session,
        "step_started",
        speaker=session.local_agent,
        envelope_ids=(call.id,),
        role="local_agent",
        call_id=call_id,
        attempt=attempts,
        remote_message=remote,
        history_turns=len(history) - (summary is not None) - bool(session.feedback),
        history_summary=summary,
        deadline=deadline.isoformat(),
        ends_by=deadline.isoformat(),
    )
    return session, (event, call)


def send_remote(
    session: OrchestratedSession,
    clock: TransitionClock,
    options: OrchestrationOptions,
    text: str,
    sent_by: SentBy,
    *,
    attempts: int = 1,
) -> tuple[OrchestratedSession, tuple[Effect, ...]]:
    """Send the outbound message to the shared agent: `ready_to_send` -> `waiting_remote`.

    A retry (`attempts` > 1) sends the same message again under the same call id; the
    outbound turn is recorded once, on the first attempt.
    """
    if attempts == 1:
        role: Role = "user" if sent_by == "you" else "local_agent"
        outbound = Turn(
            role=role,
            name=session.opener if role == "user" else session.local_agent,
            text=text,
            turn_index=session.turn_index,
            sent_by=sent_by,
        )
        session = structs.replace(session, turns=(*session.turns, outbound))
    conversation = bound_history(
        session.turns[:-1],
        max_turns=options.max_history_turns,
        max_chars=options.max_history_chars,
        summary_chars=0,
    )[0]
    call_id = derive_id(session.session_id, f"send-{session.turn_index}")
    call = AgentCall(
        id=clock.id(f"remote-{attempts}"),
        created_at=clock.now,
        target=session.shared_agent,
        thread=session.thread,
        text=text,
        call_id=call_id,
        session_id=session.session_id,
        round=session.turn_index,
        max_rounds=session.max_turns,
        goal=text,
        transcript=tuple(_item(turn, session) for turn in conversation),
        user_id=session.user_id,
    )
    deadline = clock.now + timedelta(seconds=options.turn_timeout_s)
    pending = PendingCall(
        call_id=call_id,
        envelope_id=call.id,
        target=session.shared_agent,
        phase="remote",
        attempts=attempts,
        sent_at=clock.now,
        deadline=deadline,
    )
    session = structs.replace(
        session, state="waiting_remote", pending=pending, draft="", draft_tools=(), feedback=""
    )
    event = clock.event(
        session,
        "step_started",
        speaker=session.shared_agent,
        envelope_ids=(call.id,),
        role="outbound",
        message=text,
        sent_by=sent_by,
        call_id=call_id,
        attempt=attempts,
        deadline=deadline.isoformat(),
        ends_by=deadline.isoformat(),
    )
    return session, (event, call)
