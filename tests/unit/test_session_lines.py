"""How `parley collab` and `parley orchestrate` say a session's opening (tools/_session_lines.py):
"up to 1 turns" read oddly (a newcomer's walk)."""

from __future__ import annotations

import pytest

from schemas import SessionEvent, new_id, utc_now
from tools._session_lines import render, render_event


def _opened(**payload: object) -> SessionEvent:
    return SessionEvent(
        id=new_id(),
        created_at=utc_now(),
        session_id="s1",
        event_type="session_created",
        round=0,
        speaker="local",
        payload=payload,
    )


@pytest.mark.parametrize(("limit", "said"), [(1, "up to 1 turn"), (8, "up to 8 turns")])
def test_an_orchestrated_opening_counts_its_turns(limit: int, said: str) -> None:
    line = render_event(_opened(objective="plan", local_agent="a", shared_agent="b"), limit)
    assert line is not None and line.endswith(said), line


@pytest.mark.parametrize(("limit", "said"), [(1, "up to 1 round"), (6, "up to 6 rounds")])
def test_a_collaborations_opening_counts_its_rounds(limit: int, said: str) -> None:
    line = render(_opened(participants=["gpt", "claude"]), limit)
    assert line is not None and line.endswith(said), line
