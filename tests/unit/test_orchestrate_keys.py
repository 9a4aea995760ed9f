"""`parley orchestrate`'s keys are whole lines (tools/orchestrate.py).

A newcomer's walk typed "send" at `send it? [y]es / [n]o / [e]dit` and the session stopped:
every line was taken by its first letter, so "sure", "start over" or "stop here" stopped it,
"no thanks" rejected a draft and "too vague" took the session over. A key is now one of the
letters or its word, alone on its line; anything else is said not to be a key and sends
nothing.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest

from schemas import HumanMessage, new_id, utc_now
from tools.orchestrate import _KEYS, Run


def _run(out: io.StringIO) -> Run:
    msg = HumanMessage(
        id=new_id(), created_at=utc_now(), text="plan", call_id="c1", session_id="s1"
    )
    return Run(None, None, msg, "cli", out, None)  # type: ignore[arg-type]  # nothing is sent


@pytest.mark.parametrize("line", ["send", "send it", "sure", "stop here", "no thanks", "too vague"])
def test_a_line_that_only_begins_with_a_key_sends_nothing(line: str) -> None:
    out = io.StringIO()
    run = _run(out)
    sent: list[tuple[Any, ...]] = []

    async def control(*args: Any, **kwargs: Any) -> None:
        sent.append((args, kwargs))

    run.control = control  # type: ignore[method-assign]  # what would have been sent
    run.approval, run.asking = "a1", True  # a draft awaits an answer
    asyncio.run(run.on_line(line))
    assert sent == []
    assert f"not a key: {line!r}" in out.getvalue()


def test_each_key_is_its_letter_or_its_word() -> None:
    assert {line: _KEYS[line] for line in ("y", "yes", "n", "no", "e", "edit")} == {
        "y": "y",
        "yes": "y",
        "n": "n",
        "no": "n",
        "e": "e",
        "edit": "e",
    }
    assert [_KEYS[line] for line in ("p", "pause", "r", "resume", "s", "stop")] == list("pprrss")
    assert _KEYS["t"] == _KEYS["take over"] == "t"


def test_an_answer_with_no_draft_awaiting_it_says_so() -> None:
    out = io.StringIO()
    asyncio.run(_run(out).on_line("y"))
    assert "no draft awaits your approval now: nothing was sent" in out.getvalue()


def test_a_second_answer_to_a_draft_says_the_first_was_sent() -> None:
    out = io.StringIO()
    run = _run(out)
    run.approval, run.asking = "a1", False  # answered, and not resolved by the router yet
    asyncio.run(run.on_line("yes"))
    assert "your answer to this draft was sent" in out.getvalue()
