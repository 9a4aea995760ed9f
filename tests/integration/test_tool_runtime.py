"""An agent uses tools through the gate and the tool runtime, every process its own user.

`parley say @gpt` asks a scripted agent whose profile offers File.Write and File.Read; its
brain writes a note, reads it back, then tries a path outside its scope. The gate checks each
request against the signed bundle's scope before delivery, the runtime checks again on the
real file system, and the agent's answer carries what came back: the note's text as data
with its provenance, and the refusal with its code. The file exists in the session's
workspace, and nothing outside it was read.

The system (bundle, agents and their scripts) is tests/support/tool_system.py's, shared with
the other end-to-end tool tests; each test asks its own agent.
"""

from __future__ import annotations

import json

from tests.support.system import finished
from tests.support.tool_system import ToolSystem


async def test_an_agent_writes_and_reads_a_file_and_is_refused_outside_its_scope(
    tool_system: ToolSystem,
) -> None:
    await tool_system.agent("gpt")
    code, lines = await finished(tool_system.cli("say", "@gpt", "keep a note"))
    said = "\n".join(lines)
    assert code == 0, said
    assert "data from File.Read" in said and "hi from gpt" in said, said
    assert "CAPABILITY_DENIED" in said and "/etc/hostname" in said, said
    session = next(line.split()[1].rstrip(":") for line in lines if line.startswith("session "))
    written = tool_system.workspaces / session / "notes" / "today.txt"
    assert written.read_text() == "hi from gpt"
    tool_system.assert_healthy()


async def test_an_mcp_servers_tools_are_capabilities_through_the_gate(
    tool_system: ToolSystem,
) -> None:
    """An MCP server written with the SDK, run by the runtime over stdio: the bundle grants
    `claude` one of its tools by name; the other, whose description tells a model to ignore
    its policy, is refused by the gate before the server sees a call."""
    await tool_system.agent("claude")
    code, lines = await finished(tool_system.cli("say", "@claude", "add"))
    said = "\n".join(lines)
    assert code == 0, said
    assert "data from Mcp.notes.add" in said and "42" in said, said
    assert "TOOL_NOT_ALLOWED" in said and "Mcp.notes.exfiltrate" in said, said
    called = [json.loads(line)["tool"] for line in tool_system.mcp_calls.read_text().splitlines()]
    assert called == ["add"]
    tool_system.assert_healthy()


async def test_one_sessions_long_command_holds_up_no_other_sessions_steps(
    tool_system: ToolSystem,
) -> None:
    """An attack review's agent ran a 58 s command, and another person's File.Write waited
    behind it for 50 s: the runtime handled one step at a time. Steps of different sessions
    now run at once (one session's still one after another): gpt's whole task, two rounds of
    steps, ends while sleeper's command still waits for the test to let it go."""
    await tool_system.agent("sleeper")
    await tool_system.agent("gpt")
    tools = tool_system.processes["tools"]
    start = len(tools.lines)
    waiting = tool_system.cli("say", "@sleeper", "wait for it")
    try:
        _, line = await waiting.wait_line(r"^session \S+: sleeper", timeout=30)
        session = line.split()[1].rstrip(":")
        try:
            await tools.wait_line('"step started".*"Shell.Exec"', start=start, timeout=30)
        except AssertionError:
            raise AssertionError("\n".join(waiting.lines)) from None
        code, lines = await finished(tool_system.cli("say", "@gpt", "a note meanwhile"))
        assert code == 0, lines
        assert waiting.process.poll() is None, "gpt's steps waited for sleeper's command"
        (tool_system.workspaces / session / "go").touch()  # now sleeper's command ends
        code, lines = await finished(waiting, timeout=60)
        assert code == 0 and any("went:" in line for line in lines), lines
    finally:
        waiting.close()
    tool_system.assert_healthy()
