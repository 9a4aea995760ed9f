"""One agent's steps cannot fill the record every person's steps need (an attack review).

The tool runtime records each step, and its result, in one bucket it writes for everyone. An
agent granted File.Read, asking for large results as fast as its rate allowed, filled it
within minutes: then no step of anyone's could be marked, and held approvals stopped too.
Each record is charged to its person and its agent now, and past either share a new step is
refused `RATE_LIMITED`, storing nothing, while other people's steps and other agents' run.

The shares are made one byte here, so a single step uses one up: `cli`'s first `say @gpt`
writes its note, and the reads that follow are refused; `person-bob`'s `say @claude` then
runs (another person, another agent), and `cli`'s own `say @claude` is refused on its share.
Every process is real, under the least-privilege broker config, each its own user.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.system import finished
from tests.support.tool_system import ToolSystem, running_tool_system

pytestmark = pytest.mark.timeout(240)

_ONE_BYTE = json.dumps({"step_record_bytes_per_person": 1, "step_record_bytes_per_agent": 1})


@pytest.fixture(scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ToolSystem]:
    root: Path = tmp_path_factory.mktemp("record-shares")
    async with running_tool_system(root, {"PARLEY_QUOTAS": _ONE_BYTE}) as running:
        yield running


async def test_past_a_share_steps_are_refused_and_other_peoples_run(system: ToolSystem) -> None:
    await system.agent("gpt")
    await system.agent("claude")
    code, lines = await finished(system.cli("say", "@gpt", "keep a note"))
    said = "\n".join(lines)
    assert code == 0, said
    session = next(line.split()[1].rstrip(":") for line in lines if line.startswith("session "))
    assert (system.workspaces / session / "notes" / "today.txt").read_text() == "hi from gpt"
    assert "RATE_LIMITED" in said and "step records" in said, said  # the reads after it
    assert "data from File.Read" not in said, said

    code, lines = await finished(system.cli("say", "@claude", "add", who="person-bob"))
    said = "\n".join(lines)
    assert code == 0 and "data from Mcp.notes.add" in said and "42" in said, said

    code, lines = await finished(system.cli("say", "@claude", "add"))
    said = "\n".join(lines)
    assert code == 0 and "RATE_LIMITED" in said and "person cli" in said, said
    called = [json.loads(line)["tool"] for line in system.mcp_calls.read_text().splitlines()]
    assert called == ["add"]  # bob's alone: the refused step never reached the server
    refusals = [line for line in system.processes["tools"].lines if "step refused" in line]
    assert len(refusals) == 2, refusals  # cli's read (the gate refused /etc/hostname), its add
    system.assert_healthy()
