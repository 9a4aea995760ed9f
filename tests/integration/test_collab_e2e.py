"""Seed 001 end to end: `parley collab`/`say`, the gate, the router and two agent hosts, all
real processes, with the demo's scripted agents (and, for context sharing, agents whose brains
are a local server speaking OpenAI's and Anthropic's wire formats, which records each prompt).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from bus import EmbeddedServer
from schemas import Namespace
from tests.support.llm_server import WireServer, anthropic_message, openai_completion
from tests.support.processes import REPO
from tests.support.system import finished, parley_cli, running_system
from tools.demo import DEMO_GOAL as FAIRY

HIKING = (
    "Collaborate to outline and refine a 5-step plan for a weekend hiking trip. Keep it concise."
)
STOP_AFTER_ONE = "Summarize this in 1 sentence, then stop."
PROSE = "Force malformed JSON: include prose in the answer."
TURN = re.compile(r"^\[(\w+) · (\d+)/(\d+)\] (.*)$")


def turns(lines: list[str]) -> list[tuple[str, int, str]]:
    return [(m.group(1), int(m.group(2)), m.group(4)) for line in lines if (m := TURN.match(line))]


@pytest.fixture
async def system(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> AsyncIterator[dict[str, str]]:
    async with running_system(nc, nats_server, namespace, tmp_path / "keys") as running:
        yield running.env


async def test_a_prompt_2_the_fairy_tale_alternates_and_ends_on_final(
    system: dict[str, str],
) -> None:
    code, lines = await finished(
        parley_cli(system, "collab", "--first", "claude", "--max-rounds", "4", FAIRY)
    )
    assert code == 0, "\n".join(lines)
    assert [(who, n) for who, n, _ in turns(lines)] == [
        ("claude", 1),
        ("gpt", 2),
        ("claude", 3),
        ("gpt", 4),
    ]
    assert lines[-1] == "stopped: final (round 4)"


async def test_prompt_1_the_hiking_plan_ends_on_final_within_six_rounds(
    system: dict[str, str],
) -> None:
    code, lines = await finished(parley_cli(system, "collab", "--first", "claude", HIKING))
    assert code == 0, "\n".join(lines)
    assert 2 <= len(turns(lines)) <= 6
    assert lines[-1].startswith("stopped: final")


async def test_prompt_3_final_in_the_first_reply(system: dict[str, str]) -> None:
    code, lines = await finished(parley_cli(system, "collab", STOP_AFTER_ONE))
    assert code == 0, "\n".join(lines)
    assert len(turns(lines)) == 1 and lines[-1] == "stopped: final (round 1)"


async def test_b_two_rounds_then_cap_reached(system: dict[str, str]) -> None:
    code, lines = await finished(
        parley_cli(system, "collab", "--max-rounds", "2", "Draft, review and polish a poem.")
    )
    assert code == 0, "\n".join(lines)
    assert [n for _, n, _ in turns(lines)] == [1, 2]
    assert lines[-1] == "stopped: cap_reached (round 2)"


async def test_d_prompt_5_malformed_json_ends_with_a_warning(system: dict[str, str]) -> None:
    code, lines = await finished(parley_cli(system, "collab", "--first", "gpt", PROSE))
    assert code == 0, "\n".join(lines)
    assert len(turns(lines)) == 1
    assert lines[-2] == "stopped: malformed (round 1)"
    assert "did not answer with the JSON reply envelope" in lines[-1]
    assert not any(line.startswith("    → ") for line in lines), "no handoff followed"


async def test_e_ctrl_c_stops_the_session_with_the_notice(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    # From round 2 on, each agent thinks for a while (as a model does), so the Stop pressed
    # after the first turn always arrives while the session is running.
    agents = {}
    for name, peer in (("gpt", "claude"), ("claude", "gpt")):
        (tmp_path / f"{name}-script.toml").write_text(
            f'[[turn]]\nfrom_round = 2\ndelay_s = 2.0\nmessage = "{name} thought long"\n'
            f'handoff = {{ to = "{peer}", task = "go on" }}\n'
            f'[[turn]]\nmessage = "{name} first"\nhandoff = {{ to = "{peer}", task = "go on" }}\n'
        )
        (tmp_path / f"{name}.toml").write_text(
            f'name = "{name}"\npeers = ["{peer}"]\n[brain]\nbackend = "scripted"\n'
            f'script = "{name}-script.toml"\n'
        )
        agents[name] = str(tmp_path / f"{name}.toml")
    async with running_system(nc, nats_server, namespace, tmp_path / "keys", agents) as running:
        cli = parley_cli(running.env, "collab", "--max-rounds", "6", "Refine a long essay.")
        await cli.wait_line(r"^\[gpt · 1/6\] gpt first$")
        cli.signal(signal.SIGINT)
        code, lines = await finished(cli)
    assert code == 130, "\n".join(lines)
    assert "stop requested" in lines
    assert lines[-2:] == [
        "stopped: canceled (round 2)",
        "    message: Collaboration canceled by user.",
    ]


async def test_prompt_4_two_sessions_back_to_back_never_see_each_other(
    system: dict[str, str],
) -> None:
    goals = ("Plan a birthday party.", "Plan a garden.")
    clis = [parley_cli(system, "collab", "--max-rounds", "3", goal) for goal in goals]
    results = await asyncio.gather(*(finished(cli) for cli in clis))
    for goal, other, (code, lines) in zip(goals, reversed(goals), results, strict=True):
        assert code == 0, "\n".join(lines)
        messages = [message for _, _, message in turns(lines)]
        assert len(messages) == 3
        assert all(goal in m and other not in m for m in messages), messages


async def test_a_call_the_gate_refuses_fails_the_session_with_the_gates_reason(
    system: dict[str, str],
) -> None:
    code, lines = await finished(
        parley_cli(system, "collab", "--agents", "gpt,llama", "--first", "llama", "Plan a trip.")
    )
    assert code == 1, "\n".join(lines)
    assert lines[-2] == "stopped: error (round 1)"
    assert lines[-1].startswith("    error: TARGET_NOT_ALLOWED: router may not send to llama")


async def test_a_message_the_gate_refuses_is_reported_by_the_cli(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    demo = (REPO / "deploy/policy/demo.toml").read_text()
    policy = tmp_path / "no-cli.toml"
    policy.write_text(demo.replace("[profiles.cli]", "[profiles.cli-disabled]"))
    async with running_system(
        nc, nats_server, namespace, tmp_path / "keys", policy=policy
    ) as running:
        code, lines = await finished(parley_cli(running.env, "collab", "Plan a trip."))
    assert code == 1, "\n".join(lines)
    assert lines[-1].startswith("refused by the gate: UNAUTHORIZED: ")
    assert "no profile for 'cli'" in lines[-1]


async def test_say_is_a_single_call(system: dict[str, str]) -> None:
    code, lines = await finished(parley_cli(system, "say", "@claude", "What", "is", "NATS?"))
    assert code == 0, "\n".join(lines)
    ((who, n, message),) = turns(lines)
    assert (who, n) == ("claude", 1) and "What is NATS?" in message
    assert lines[-1] == "stopped: answered (round 1)"


def _reply(message: str, to: str | None = None, final: bool = False) -> str:
    body: dict[str, object] = {"message": message}
    if to:
        body["handoff"] = {"to": to, "task": f"Your turn, {to}."}
    if final:
        body["final"] = True
    return json.dumps(body)


async def test_a_each_agents_prompt_carries_the_others_latest_message(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    """Context sharing through the whole path, seen where it matters: in the model's prompt."""
    llm = WireServer()
    url = await llm.start()
    profiles = tmp_path / "agents"
    profiles.mkdir()
    (profiles / "gpt.toml").write_text(
        'name = "gpt"\nmodel = "gpt-test"\npeers = ["claude"]\n[brain]\nbackend = "openai"\n'
        f'base_url = "{url}/v1"\napi_key_env = "TEST_LLM_KEY"\n'
    )
    (profiles / "claude.toml").write_text(
        'name = "claude"\nmodel = "claude-test"\npeers = ["gpt"]\n[brain]\n'
        f'backend = "anthropic"\nbase_url = "{url}"\napi_key_env = "TEST_LLM_KEY"\n'
    )
    said = [
        "Claude's draft: a fox named Ember.",
        "GPT's edit: Ember, a fox of embers.",
        "Claude's ending: the village glows.",
        "GPT: done.",
    ]
    llm.queue(
        anthropic_message(_reply(said[0], "gpt")),
        openai_completion(_reply(said[1], "claude")),
        anthropic_message(_reply(said[2], "gpt")),
        openai_completion(_reply(said[3], final=True)),
    )
    agents = {name: str(profiles / f"{name}.toml") for name in ("gpt", "claude")}
    try:
        async with running_system(
            nc,
            nats_server,
            namespace,
            tmp_path / "keys",
            agents,
            extra_env={"TEST_LLM_KEY": "sk-test"},
        ) as running:
            code, lines = await finished(
                parley_cli(running.env, "collab", "--first", "claude", "--max-rounds", "4", FAIRY)
            )
    finally:
        await llm.close()
    assert code == 0, "\n".join(lines)
    prompts = [json.dumps(request.body, ensure_ascii=False) for request in llm.requests]
    assert len(prompts) == 4
    for turn in range(1, 4):
        assert said[turn - 1] in prompts[turn], f"call {turn + 1} lacks the previous message"
        assert FAIRY in prompts[turn] and f"Round {turn + 1} of 4" in prompts[turn]


async def test_parley_demo_runs_the_fairy_tale_and_exits_0(tmp_path: Path) -> None:
    # The demo starts its own server: no NATS_URL, no test namespace.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NATS_URL", "PARLEY_NAMESPACE", "PARLEY_NATS_URL")
    }
    code, lines = await finished(parley_cli(env, "demo", "--keep", str(tmp_path)), timeout=120)
    output = "\n".join(lines)
    assert code == 0, output
    assert "stopped: final (round 4)" in lines
    assert "── Transcript ──" in lines and "── Trace (the gate's decisions) ──" in lines
    trace = lines[lines.index("── Trace (the gate's decisions) ──") + 1 :]
    assert trace[0].split()[:3] == ["allow", "cli", "→"]
    assert sum(1 for line in trace if "agent_call" in line) == 4
    assert lines[-1] == "parley demo: done"
