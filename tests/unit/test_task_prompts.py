"""What `parley task` says when a tool request awaits the person (tools/task.py)."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any, cast

from nats.aio.client import Client as NATS

from schemas import HumanMessage, Namespace, SessionEvent
from tools._waiting import Watch
from tools.task import TaskRun

T0 = datetime(2026, 11, 29, tzinfo=UTC)


def _held(approval_id: str) -> SessionEvent:
    payload: dict[str, Any] = {"approval_id": approval_id, "title": f"builder asks {approval_id}"}
    return SessionEvent(
        id=f"e-{approval_id}",
        created_at=T0,
        session_id="s1",
        event_type="approval_requested",
        payload=payload,
    )


def _run() -> tuple[TaskRun, io.StringIO]:
    out = io.StringIO()
    msg = HumanMessage(id="m1", created_at=T0, text="go", call_id="c1", session_id="s1")
    run = TaskRun(cast(NATS, None), Namespace("parley"), msg, "cli", out, cast(Watch, None))
    return run, out


def test_with_standard_input_ended_every_held_request_says_how_to_decide_it() -> None:
    """A newcomer's walk: `parley task … < /dev/null` printed the command for the first held
    request only; the second came with no way to decide it."""
    run, out = _run()
    run.input_ended = True
    run.on_event(_held("a1"))
    run.on_event(_held("a2"))
    said = out.getvalue()
    for approval_id in ("a1", "a2"):
        assert f"`parley approvals approve {approval_id} --session s1` (or reject)" in said, said
    assert "approve? [y]es" not in said


def test_at_a_terminal_the_question_is_asked_once_for_the_first_held_request() -> None:
    run, out = _run()
    run.on_event(_held("a1"))
    run.on_event(_held("a2"))
    assert out.getvalue().count("approve? [y]es / [n]o / [e]xplain instead") == 1
    assert run.asking == ["a1", "a2"]
