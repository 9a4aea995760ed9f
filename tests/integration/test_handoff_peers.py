"""A valid JSON reply that hands off to an agent that is not the speaker's peer, end to end:
the gate, the router and scripted agent hosts as real processes, the session opened and
followed by `parley collab` as a person runs it. The reply is no broken envelope, so the
session must not end `malformed` with a warning about the JSON: it ends `unknown_peer`, and
the warning names the agent handed off to and the peers the speaker may hand off to.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from bus import EmbeddedServer
from schemas import Namespace
from tests.support.agents import write_profile
from tests.support.system import finished, parley_cli, running_system

CLAUDE_SCRIPT = """
[[turn]]
goal = "stranger"
message = "Over to the bard."
handoff = { to = "bard", task = "Sing it." }

[[turn]]
goal = "planner"
message = "Over to the planner."
handoff = { to = "planner", task = "Plan it." }
"""
ANSWER_SCRIPT = """
[[turn]]
message = "{name} answers."
final = true
"""


@pytest.mark.parametrize(
    ("goal", "agents", "named", "allowed"),
    [
        # Not in the session at all.
        ("hand it to a stranger", "claude,gpt", "'bard'", "(gpt)"),
        # In the session, but not among claude's peers (its profile allows only gpt).
        ("hand it to the planner", "claude,gpt,planner", "'planner'", "(gpt)"),
    ],
)
async def test_a_handoff_to_an_agent_that_is_no_peer_ends_naming_it_and_the_peers(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    tmp_path: Path,
    goal: str,
    agents: str,
    named: str,
    allowed: str,
) -> None:
    profiles = tmp_path / "profiles"
    claude = write_profile(
        profiles,
        "claude",
        'backend = "scripted"\nscript = "claude-script.toml"',
        script=CLAUDE_SCRIPT,
        extra='peers = ["gpt"]',
    )
    others = {
        name: str(
            write_profile(
                profiles,
                name,
                f'backend = "scripted"\nscript = "{name}-script.toml"',
                script=ANSWER_SCRIPT,
            )
        )
        for name in agents.split(",")[1:]
    }
    hosts = {"claude": str(claude), **others}
    async with running_system(nc, nats_server, namespace, tmp_path / "keys", hosts) as system:
        code, lines = await finished(
            parley_cli(system.env, "collab", "--agents", agents, "--first", "claude", goal)
        )
    output = "\n".join(lines)
    assert "stopped: unknown_peer (round 1)" in lines, output
    warning = next(line for line in lines if line.startswith("    warning: "))
    assert f"claude handed off to {named}, who is not one of its peers" in warning, output
    assert warning.endswith(f"{allowed}: the handoff was not followed"), output
    assert "JSON" not in output and code == 0, output  # it ended, as malformed ones do
