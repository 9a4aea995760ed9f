"""The agent host's pure parts: the reply contract, prompts, profiles and scripts."""

from __future__ import annotations

import asyncio
import json
import tomllib
from pathlib import Path

import pytest

from actors.agent._profile import AgentProfile, ScriptedBrainConfig, load_profile
from actors.agent._prompt import (
    JSON_ONLY,
    SHARED_RULES,
    BrainCall,
    system_prompt,
    user_prompt,
)
from actors.agent._reply import EMPTY_REPLY_TEXT, interpret_reply, reply_json_schema
from actors.agent.brains._protocol import BrainError
from actors.agent.brains._scripted import ScriptedBrain, ScriptedCall
from actors.delegation import USE_TOOL_DEADLINE_MS, Delegate, UseTool
from bus import ConfigError
from schemas import ErrorCode, TranscriptItem
from tests.support.agents import FAIRY_TALE
from tests.support.processes import REPO
from tools.cli import main


def call(
    goal: str,
    round: int = 1,
    *,
    transcript: tuple[TranscriptItem, ...] = (),
    final_round: bool = False,
) -> BrainCall:
    return BrainCall(
        kind="agent_call",
        envelope_id="e",
        call_id="c",
        session_id="s",
        goal=goal,
        round=round,
        max_rounds=4,
        transcript=transcript,
        final_round=final_round,
    )


@pytest.mark.parametrize(
    ("text", "malformed"),
    [
        ('{"message": "hi"}', False),
        ('{"message": "hi", "final": true}', False),
        ('{"message": "hi", "handoff": {"to": "gpt", "task": "go"}}', False),
        ("plain prose", True),
        ('{"message": ""}', True),
        ('{"message": "hi", "extra": 1}', True),
        ('{"message": "hi", "handoff": {"to": "gpt"}}', True),
        ('{"message": "hi", "handoff": {"to": "gpt", "task": "' + "x" * 501 + '"}}', True),
        ('{"message": "hi", "handoff": {"to": "bard", "task": "sing"}}', True),
        ('["message"]', True),
        ('{"message": "hi"', True),
    ],
)
def test_reply_contract(text: str, malformed: bool) -> None:
    interpreted = interpret_reply(text, ("gpt", "claude"))
    assert interpreted.malformed is malformed
    if malformed:
        # Seed 001 §3: the raw output is the message, with no handoff and not final.
        assert interpreted.reply.message == text.strip() or interpreted.reply.message == text
        assert not interpreted.reply.handoff and not interpreted.reply.final
        assert interpreted.problem


def test_an_empty_answer_is_still_a_message() -> None:
    interpreted = interpret_reply("   ")
    assert interpreted.malformed and interpreted.reply.message == EMPTY_REPLY_TEXT


def test_schema_is_seed_001_with_the_peers() -> None:
    schema = reply_json_schema(("gpt", "claude"))
    assert schema["properties"]["handoff"]["properties"]["to"] == {
        "type": "string",
        "enum": ["gpt", "claude"],
    }
    assert schema["properties"]["handoff"]["properties"]["task"]["maxLength"] == 500
    assert "pattern" in reply_json_schema()["properties"]["handoff"]["properties"]["to"]


def test_prompts_carry_rules_name_goal_window_round_and_json_instruction() -> None:
    profile = load_profile("gpt", REPO / "deploy" / "agents")
    system = system_prompt(profile)
    assert system.startswith(SHARED_RULES) and "Your name is `gpt`." in system
    transcript = tuple(
        TranscriptItem(role="claude", name="claude", text=f"t{n}") for n in range(12)
    )
    prompt = user_prompt(call("G", round=3, transcript=transcript, final_round=True), profile)
    assert prompt.startswith("Goal: G")
    assert "[claude] t3" not in prompt and "[claude] t4\n" in prompt and "[claude] t11" in prompt
    assert "Round 3 of 4. This is the last round" in prompt and prompt.endswith(JSON_ONLY)


def test_prompt_window_is_cut_to_the_profile() -> None:
    """The profile's item count and half its context (in characters) bound the window."""
    profile = load_profile("gpt", REPO / "deploy" / "agents")
    items = tuple(TranscriptItem(role="a", name="a", text=f"t{n}" + "x" * 8) for n in range(5))

    def shown(transcript: tuple[TranscriptItem, ...], **limits: int) -> list[str]:
        prompt = user_prompt(call("G", transcript=transcript), profile.model_copy(update=limits))
        return [line[4:] for line in prompt.splitlines() if line.startswith("[a] ")]

    assert shown(items) == [item.text for item in items]
    assert shown(items, transcript_window=3) == [item.text for item in items[2:]]
    assert shown(items, transcript_window=0) == []
    # 15 tokens of context: 30 characters of transcript text, three items of ten.
    assert shown(items, max_context_tokens=15) == [item.text for item in items[2:]]
    # The newest item alone over the budget is cut, not dropped: the turn still sees it.
    (cut,) = shown((TranscriptItem(role="a", name="a", text="y" * 100),), max_context_tokens=15)
    assert cut == "y" * 29 + "…"


def test_demo_scripts_play_the_fairy_tale() -> None:
    brains = {name: _scripted(name) for name in ("gpt", "claude")}
    speaker, finals = "claude", []
    for round_no in range(1, 5):
        reply = interpret_reply(asyncio.run(brains[speaker].reply(call(FAIRY_TALE, round_no))).text)
        assert not reply.malformed
        finals.append(reply.reply.final)
        if reply.reply.handoff:
            speaker = reply.reply.handoff.to
    assert finals == [False, False, False, True] and speaker == "gpt"


@pytest.mark.parametrize(
    ("goal", "final", "malformed"),
    [
        (
            "Collaborate to outline and refine a 5\u2011step plan for a weekend hiking trip. "
            "Keep it concise.",
            False,
            False,
        ),
        ("Summarize this in 1 sentence, then stop.", True, False),
        ("Answer but include prose", False, True),
        ("Some multi-step task", False, False),
    ],
)
def test_demo_scripts_cover_the_other_test_prompts(goal: str, final: bool, malformed: bool) -> None:
    reply = interpret_reply(asyncio.run(_scripted("gpt").reply(call(goal))).text, ("claude",))
    assert (reply.reply.final, reply.malformed) == (final, malformed)


def test_hiking_plan_ends_with_final_within_six_rounds() -> None:
    goal = "Collaborate to outline and refine a 5\u2011step plan for a weekend hiking trip."
    brains = {name: _scripted(name) for name in ("gpt", "claude")}
    speaker = "gpt"
    for round_no in range(1, 7):
        answer = asyncio.run(brains[speaker].reply(call(goal, round_no)))
        reply = interpret_reply(answer.text).reply
        if reply.final:
            break
        assert reply.handoff
        speaker = reply.handoff.to
    assert reply.final and round_no <= 6


def _scripted(name: str) -> ScriptedBrain:
    profile = load_profile(name, REPO / "deploy" / "agents")
    assert isinstance(profile.brain, ScriptedBrainConfig)
    return ScriptedBrain(profile, profile.brain)


def test_script_without_a_matching_turn_is_a_non_retryable_error(tmp_path: Path) -> None:
    script = tmp_path / "s.toml"
    script.write_text('[[turn]]\ngoal = "only this"\nmessage = "ok"\n')
    config = ScriptedBrainConfig(backend="scripted", script=script)
    brain = ScriptedBrain(AgentProfile(name="a", brain=config), config)
    with pytest.raises(BrainError) as caught:
        asyncio.run(brain.reply(call("something else")))
    assert caught.value.code == ErrorCode.INTERNAL_ERROR and not caught.value.retryable
    assert json.loads(asyncio.run(brain.reply(call("only this please"))).text) == {"message": "ok"}


def test_profile_errors_name_the_field_and_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="agent profile not found"):
        load_profile("nobody", tmp_path)
    with pytest.raises(ConfigError, match="invalid profile name"):
        load_profile("Bad Name", tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nmax_output_tokens = 0\n[brain]\nbackend = "carrier-pigeon"\n')
    with pytest.raises(ConfigError) as caught:
        load_profile(str(bad))
    text = str(caught.value)
    assert "max_output_tokens" in text and "(got 0)" in text and "carrier-pigeon" in text
    script = tmp_path / "broken.toml"
    script.write_text('name = "x"\n[brain]\nbackend = "scripted"\nscript = "missing.toml"\n')
    profile = load_profile(str(script))
    assert isinstance(profile.brain, ScriptedBrainConfig)
    assert profile.brain.script == tmp_path.resolve() / "missing.toml"


def test_run_agent_with_a_missing_profile_exits_with_the_config_code(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "agent", "--profile", "nobody-here"]) == 2
    assert "agent profile not found" in capsys.readouterr().err


def test_the_agent_docs_profile_example_is_a_valid_profile() -> None:
    text = (REPO / "docs" / "agents.md").read_text()
    section = text[text.index("# Agent hosts") :]
    block = section[section.index("```toml\n") + len("```toml\n") : section.index("```\n", 10)]
    profile = AgentProfile.model_validate(tomllib.loads(block))
    assert (profile.name, profile.brain.backend, profile.peers) == ("gpt", "openai", ("claude",))


def test_a_script_with_a_bad_placeholder_fails_at_load(tmp_path: Path) -> None:
    script = tmp_path / "s.toml"
    script.write_text('[[turn]]\nmessage = "hello {nobody}"\n')
    config = ScriptedBrainConfig(backend="scripted", script=script)
    with pytest.raises(ConfigError, match="bad placeholder"):
        ScriptedBrain(AgentProfile(name="a", brain=config), config)


def test_a_scripted_tool_request_waits_as_long_as_a_models_for_its_approval() -> None:
    """A scripted `use_tool` left its `deadline_ms` at a call's 15 s: held for a person's
    approval, its request was let go after 15 s, long before the rule's 300 s. It waits as a
    model's tool call does (`USE_TOOL_DEADLINE_MS`); a call to an agent still 15 s."""
    asked = call("write it")
    tool = ScriptedCall(tool="use_tool", to="File.Write", arguments={"path": "a.txt"})
    request = tool.request(0, asked, {"task": "t"})
    assert isinstance(request, UseTool)
    assert request.deadline_ms == USE_TOOL_DEADLINE_MS
    delegated = ScriptedCall(to="gpt").request(1, asked, {"task": "t"})
    assert isinstance(delegated, Delegate) and delegated.deadline_ms == 15_000
    told = ScriptedCall(tool="use_tool", to="File.Read", deadline_ms=4_000).request(
        2, asked, {"task": "t"}
    )
    assert isinstance(told, UseTool) and told.deadline_ms == 4_000
