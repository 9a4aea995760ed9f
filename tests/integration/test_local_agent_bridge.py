"""Seed 000's local agent channel, rule by rule, against real child processes."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from actors.agent._profile import AgentProfile, SubprocessBrainConfig, load_profile
from actors.agent._prompt import BrainCall
from actors.agent._reply import interpret_reply
from actors.agent.brains._protocol import BrainError
from actors.agent.brains._subprocess import SubprocessBrain, bounded_history
from schemas import HISTORY_SUMMARY, ErrorCode, TranscriptItem
from tests.support.processes import REPO

BRIDGE_AGENT = str(REPO / "tests" / "support" / "bridge_agent.py")
HANG_TIMEOUT_S = 3.0
"""The turn limit of the test that waits it out: short, and still above a fresh child's
start on a loaded machine (the request after the timeout starts one)."""


def make_brain(command: tuple[str, ...], **brain: Any) -> SubprocessBrain:
    config = SubprocessBrainConfig(backend="subprocess", command=command, **brain)
    profile = AgentProfile(name="local", brain=config)
    return SubprocessBrain(profile, config)


def call(goal: str, *, transcript: tuple[TranscriptItem, ...] = (), round: int = 1) -> BrainCall:
    return BrainCall(
        kind="agent_call",
        envelope_id="e-1",
        call_id="c-1",
        session_id="s-1",
        goal=goal,
        transcript=transcript,
        round=round,
        max_rounds=6,
    )


def seen(text: str) -> dict[str, Any]:
    """What the contract agent says it was sent (its reply's message is JSON)."""
    interpreted = interpret_reply(text)
    assert not interpreted.malformed, interpreted.problem
    seen_by_agent: dict[str, Any] = json.loads(interpreted.reply.message)
    return seen_by_agent


@pytest.fixture
async def brain() -> AsyncIterator[SubprocessBrain]:
    # A turn's time includes a fresh child's start: on a loaded 2-core machine a Python child
    # can take over a second to import before it answers (a 1 s limit failed that way).
    subject = make_brain((sys.executable, BRIDGE_AGENT), turn_timeout_s=10.0)
    await subject.start()
    yield subject
    await subject.close()


async def test_the_example_local_agent_drafts_until_it_has_a_reason_to_end() -> None:
    """Its first reply is a message to send (not final); it ends after the shared agent's
    third answer, or at once when an answer says it is done (examples/local_agent.py)."""
    example = make_brain((sys.executable, str(REPO / "examples" / "local_agent.py")))
    goal = "review this API for security issues"

    def answered(text: str) -> tuple[TranscriptItem, ...]:
        return (TranscriptItem(role="claude", name="claude", text=text),)

    await example.start()
    try:
        answer = await example.reply(call(goal))
        middle = await example.reply(call(goal, transcript=answered("Check auth."), round=3))
        enough = await example.reply(call(goal, transcript=answered("Check CSRF."), round=4))
        done = await example.reply(call(goal, transcript=answered("That is all."), round=2))
    finally:
        await example.close()
    first = interpret_reply(answer.text)
    assert not first.malformed and not first.reply.final
    assert goal in first.reply.message
    assert answer.usage.total == answer.usage.prompt + answer.usage.completion > 0
    asked = interpret_reply(middle.text).reply
    assert not asked.final and "Check auth." in asked.message
    for text, why in ((enough.text, "answered 3 times"), (done.text, "'that is all'")):
        ended = interpret_reply(text).reply
        assert ended.final and why in ended.message, ended
    assert example.bridge.violations == 0


def test_the_shipped_local_profile_runs_the_example_program_wherever_it_is_started() -> None:
    """A script `{python}` runs is found next to the profile, not in the host's directory."""
    profile = load_profile("local")
    assert isinstance(profile.brain, SubprocessBrainConfig)
    assert profile.brain.command == (sys.executable, str(REPO / "examples" / "local_agent.py"))


async def test_request_frame_carries_the_call_and_seed_000_constraints(
    brain: SubprocessBrain,
) -> None:
    transcript = (
        TranscriptItem(role="user", name="you", text="goal"),
        TranscriptItem(role="local", name="local", text="mine"),
        TranscriptItem(role="gpt", name="gpt", text="theirs"),
    )
    got = seen((await brain.reply(call("objective", transcript=transcript, round=3))).text)
    assert got["objective"] == "objective" and got["remote"] == "theirs"
    assert got["turns"] == ["user", "local_agent", "remote_agent"]
    assert (got["profile"], got["turn_index"], got["summary"]) == ("local", 3, None)
    assert (got["tools"], got["timeout_ms"]) == (False, 10_000)


def test_default_timeouts_are_60_s_and_120_s_with_tool_use() -> None:
    plain = SubprocessBrainConfig(backend="subprocess", command=("x",))
    tools = SubprocessBrainConfig(backend="subprocess", command=("x",), allow_tool_use=True)
    assert (plain.timeout_s, tools.timeout_s) == (60.0, 120.0)


async def test_exactly_one_request_in_flight(brain: SubprocessBrain) -> None:
    """The agent handles requests on threads: had two been sent at once, they would overlap."""
    answers = await asyncio.gather(*(brain.reply(call(f"[slow] {n}")) for n in range(3)))
    assert [seen(a.text)["outstanding"] for a in answers] == [1, 1, 1]
    assert sorted(seen(a.text)["objective"] for a in answers) == [f"[slow] {n}" for n in range(3)]


@pytest.mark.parametrize("marker", ["[unknown-id]", "[garbage]"])
async def test_stray_lines_are_ignored_and_counted(brain: SubprocessBrain, marker: str) -> None:
    answer = await brain.reply(call(f"{marker} then the real answer"))
    assert seen(answer.text)["objective"] == f"{marker} then the real answer"
    assert brain.bridge.violations == 1


async def test_a_second_terminal_frame_is_a_violation(brain: SubprocessBrain) -> None:
    first = await brain.reply(call("[twice] answer"))
    assert seen(first.text)["objective"] == "[twice] answer"
    # Frames arrive in order: by the time the next answer is read, the duplicate was too.
    second = await brain.reply(call("next"))
    assert seen(second.text)["objective"] == "next"
    assert brain.bridge.violations == 1


async def test_timeout_is_agent_unavailable_and_the_next_request_gets_a_fresh_child() -> None:
    brain = make_brain((sys.executable, BRIDGE_AGENT), turn_timeout_s=HANG_TIMEOUT_S)
    await brain.start()
    try:
        first_pid = brain.bridge.pid
        with pytest.raises(BrainError) as caught:
            await brain.reply(call("[hang] forever"))
        assert caught.value.code == ErrorCode.AGENT_UNAVAILABLE and caught.value.retryable
        assert f"no response within {HANG_TIMEOUT_S:g} s" in caught.value.message
        answer = await brain.reply(call("after the timeout"))
        assert seen(answer.text)["pid"] != first_pid and brain.bridge.starts == 2
    finally:
        await brain.close()


async def test_child_exiting_mid_request_fails_it_at_once_and_the_next_is_served() -> None:
    subject = make_brain((sys.executable, BRIDGE_AGENT), turn_timeout_s=60.0)
    await subject.start()
    try:
        with pytest.raises(BrainError) as caught:
            await subject.reply(call("[exit] now"))
        # The exit, not the 60 s timeout, ended the request.
        assert caught.value.code == ErrorCode.AGENT_UNAVAILABLE and caught.value.retryable
        assert "exited (code 3)" in caught.value.message
        answer = await subject.reply(call("still serving"))
        assert seen(answer.text)["objective"] == "still serving"
        assert subject.bridge.starts == 2
    finally:
        await subject.close()


async def test_error_status_is_an_error_that_is_not_retried(brain: SubprocessBrain) -> None:
    with pytest.raises(BrainError) as caught:
        await brain.reply(call("[error] please"))
    assert caught.value.code == ErrorCode.INTERNAL_ERROR and not caught.value.retryable
    assert "asked to fail" in caught.value.message


async def test_a_program_that_cannot_start_is_agent_unavailable(tmp_path: Path) -> None:
    missing = make_brain((str(tmp_path / "no-such-agent"),))
    with pytest.raises(BrainError) as caught:
        await missing.start()
    assert caught.value.code == ErrorCode.AGENT_UNAVAILABLE
    await missing.close()


def test_history_is_bounded_by_turns_and_chars_with_a_summary() -> None:
    transcript = tuple(
        TranscriptItem(role="gpt" if n % 2 else "local", name="", text=f"turn {n} " + "x" * 20)
        for n in range(10)
    )
    kept, summary = bounded_history(transcript, "local", max_turns=6, max_chars=90)
    assert [turn.text[:7] for turn in kept] == ["turn 7 ", "turn 8 ", "turn 9 "]
    assert summary is not None and summary.startswith("7 earlier turn(s): local_agent: turn 0")
    assert bounded_history(transcript, "local", 6, 10_000)[0][0].text.startswith("turn 4")
    assert bounded_history(transcript[:2], "local", 6, 10_000)[1] is None


def test_the_routers_summary_leads_the_summary_whole_and_is_never_a_turn() -> None:
    """Seed 000 on one deployment: the router bounds the history and sends a summary item of
    the turns it dropped; the host bounds again. Taken for a turn, that item was dropped in
    its turn and cut to 80 characters ("1 earlier turn(s): remote_agent: 7 earlier turn(s):
    1. local_agent: …"), losing turns 2-7."""
    told = "7 earlier turn(s): " + " | ".join(f"{n}. local_agent: draft {n}" for n in range(1, 8))
    summary_item = TranscriptItem(role="router", name=HISTORY_SUMMARY, text=told)
    turns = tuple(
        TranscriptItem(role="gpt" if n % 2 else "local", name="", text=f"turn {n} " + "x" * 20)
        for n in range(8, 12)
    )
    kept, summary = bounded_history((summary_item, *turns), "local", max_turns=2, max_chars=900)
    assert [turn.text[:8] for turn in kept] == ["turn 10 ", "turn 11 "]
    assert summary == f"{told} | 2 earlier turn(s): local_agent: {turns[0].text} | " + (
        f"remote_agent: {turns[1].text}"
    )
    # Nothing dropped here: the router's summary is the summary, and no turn.
    kept, summary = bounded_history((summary_item, *turns), "local", 6, 10_000)
    assert len(kept) == 4 and summary == told
