"""Seed 004's filtered context as an agent host builds it from a real call, and as the
callee's model is shown it.

Three findings, each failing without its fix: role filters named the seed's roles (`user`,
`assistant`) while a transcript's roles are agent names, so they matched nothing; `max_age`
did nothing, since transcript items carried no time; the summary and the workspace view were
built into the call's context, but never reached the callee's prompt.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from actors.agent._profile import load_profile
from actors.agent._prompt import call_for, user_prompt
from actors.agent._subcontext import SubContexts
from actors.delegation import CallSubAgent, Wait
from schemas import (
    HISTORY_SUMMARY,
    AgentCall,
    ContextFilter,
    FilteredContext,
    SubAgentArgs,
    SubAgentCall,
    TranscriptItem,
    encode,
    new_id,
    utc_now,
)
from tests.support.processes import REPO

ROUTER_SUMMARY = "4 earlier turn(s): 1. alice: plan a trip | 2. planner: three days"


def _wait() -> Wait:
    """The planner answering the router's call: an old line from the person, its own turn,
    the coder's, the router's handoff, and the router's summary of what it dropped. Timed
    from now, when the test runs: the context is cut against the clock at that moment (a
    time taken at import went stale on a busy test worker)."""
    now = utc_now()
    an_hour_ago = now - timedelta(hours=1)
    transcript = (
        TranscriptItem(role="router", name=HISTORY_SUMMARY, text=ROUTER_SUMMARY),
        TranscriptItem(role="user", name="alice", text="budget is tight", created_at=an_hour_ago),
        TranscriptItem(role="planner", name="planner", text="day one: hike", created_at=now),
        TranscriptItem(role="coder", name="coder", text="day two: museum", created_at=now),
        TranscriptItem(role="router", name="planner", text="finish the plan", created_at=now),
    )
    call = AgentCall(
        id=new_id(),
        created_at=now,
        target="planner",
        call_id=new_id(),
        goal="Plan a trip",
        text="finish the plan",
        transcript=transcript,
    )
    return Wait(call_id=call.id, caller="router", call=encode(call), headers={})


def _context(context_filter: ContextFilter, root: Path | None = None) -> FilteredContext:
    request = CallSubAgent(
        request_id="r-1", args=SubAgentArgs(agent_name="coder", task="t", context=context_filter)
    )
    built = SubContexts(root, "planner").context_for(_wait(), request)
    assert built is not None
    return built


def test_role_filters_name_the_seed_roles_as_the_caller_sees_its_conversation() -> None:
    mine = _context(ContextFilter(roles=("assistant",)))
    assert [m.content for m in mine.messages] == ["[planner] day one: hike"]
    others = _context(ContextFilter(roles=("user",)))
    assert [m.content for m in others.messages] == [
        "[alice] budget is tight",
        "[coder] day two: museum",
        "finish the plan",
    ]
    system = _context(ContextFilter(roles=("system",)))
    assert [m.content for m in system.messages] == ["[planner] finish the plan"], (
        "the router's handoff is a system line, and its summary no message at all"
    )


def test_max_age_drops_what_the_router_added_before_the_cutoff() -> None:
    recent = _context(ContextFilter(max_age_seconds=600))
    assert "[alice] budget is tight" not in [m.content for m in recent.messages]
    assert len(recent.messages) == 4


def test_the_summary_is_the_routers_and_the_callee_is_shown_it_and_the_workspace(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.md").write_text("trip notes")
    context = _context(
        ContextFilter(
            last_messages=1,
            include_summary=True,
            include_workspace=True,
            workspace_files=("notes.md",),
        ),
        tmp_path,
    )
    assert context.summary is not None and ROUTER_SUMMARY in context.summary
    assert context.workspace is not None and "notes.md" in context.workspace
    call = SubAgentCall(
        id=new_id(),
        created_at=utc_now(),
        call_id=new_id(),
        caller="planner",
        session_id=new_id(),
        args=SubAgentArgs(agent_name="coder", task="Write day three"),
        context=context,
    )
    prompt = user_prompt(call_for(call, 1), load_profile("coder", REPO / "deploy" / "agents"))
    assert ROUTER_SUMMARY in prompt
    assert "notes.md" in prompt
    assert json.dumps(prompt)  # plain text, as a model request carries it
