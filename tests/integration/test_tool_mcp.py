"""MCP servers as tools: the hub against a real MCP server written with the SDK, run as a
process over stdio and over streamable HTTP on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from actors.tools import McpHub, McpServerSettings, ScopeDenied
from schemas import ErrorCode
from tests.support.mcp_hub import (
    LISTED_TOOLS,
    Announcements,
    http_server,
    invocation,
    process_gone,
    recorded,
    stdio_settings,
)
from tests.support.mcp_tools_server import HOSTILE_DESCRIPTION
from tests.support.processes import REPO

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "todo.txt").write_text("buy milk\n", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("the secret\n", encoding="utf-8")
    return root


@pytest.fixture
def record(tmp_path: Path) -> Path:
    return tmp_path / "calls.jsonl"


@contextlib.contextmanager
def server_settings(transport: str, record: Path) -> Iterator[McpServerSettings]:
    if transport == "stdio":
        yield stdio_settings("notes", record)
        return
    with http_server(record) as url:
        yield McpServerSettings(name="notes", url=url, startup_timeout_s=30)


@pytest.fixture(params=["stdio", "http"])
async def hub(request: pytest.FixtureRequest, record: Path) -> AsyncIterator[McpHub]:
    with server_settings(request.param, record) as settings:
        async with McpHub([settings]) as running:
            yield running


async def test_tools_listed_called_failed_and_not_found(hub: McpHub, workspace: Path) -> None:
    listed = hub.capabilities()
    assert set(listed) == {f"Mcp.notes.{tool}" for tool in LISTED_TOOLS}
    add = listed["Mcp.notes.add"]
    assert (add.server, add.tool) == ("notes", "add")
    assert set(add.input_schema["properties"]) == {"a", "b"}

    done = await hub.call(invocation("Mcp.notes.add", {"a": 2, "b": 40}, workspace=workspace))
    assert (done.status, done.output_text, done.error_code) == ("succeeded", "42", None)
    assert done.provenance is not None
    assert (done.provenance.source, done.provenance.trust) == ("Mcp.notes.add", "untrusted")

    failed = await hub.call(invocation("Mcp.notes.fail", workspace=workspace))
    assert (failed.status, failed.error_code) == ("failed", "TOOL_EXECUTION_FAILED")
    assert "always fails" in failed.output_text

    for unknown in ("Mcp.notes.nope", "Mcp.elsewhere.add", "Shell.Exec", "Mcp.notes.Shell.Exec"):
        missing = await hub.call(invocation(unknown, workspace=workspace))
        assert (missing.status, missing.error_code) == ("failed", "TOOL_NOT_FOUND"), unknown


async def test_path_outside_allowed_paths_refused_before_the_server(
    hub: McpHub, workspace: Path, record: Path
) -> None:
    (workspace / "notes" / "escape").symlink_to(workspace.parent / "secret.txt")
    scope: dict[str, Any] = {"allowed_paths": ("notes",)}
    inside = await hub.call(
        invocation("Mcp.notes.read_note", {"path": "notes/todo.txt"}, workspace=workspace, **scope)
    )
    assert (inside.status, inside.output_text) == ("succeeded", "buy milk\n")
    # The server was sent the resolved path it was checked as, not one relative to its cwd.
    assert recorded(record)[-1] == {
        "tool": "read_note",
        "arguments": {"path": str((workspace / "notes" / "todo.txt").resolve())},
    }
    outside = (
        "../secret.txt",
        "notes/../../secret.txt",
        str(workspace.parent / "secret.txt"),
        "notes/escape",
        "notes-other/x",
    )
    for path in outside:
        with pytest.raises(ScopeDenied) as refused:
            await hub.call(
                invocation("Mcp.notes.read_note", {"path": path}, workspace=workspace, **scope)
            )
        assert (refused.value.rule, refused.value.code) == (
            "allowed_paths",
            ErrorCode.CAPABILITY_DENIED,
        )
    assert [call["tool"] for call in recorded(record)] == ["read_note"]


async def test_killed_stdio_server_restarted_on_next_call(record: Path, workspace: Path) -> None:
    async with (
        Announcements() as announced,
        McpHub([stdio_settings("notes", record, announced.path)]) as hub,
    ):
        first = await hub.call(invocation("Mcp.notes.pid", workspace=workspace))
        first_pid = int(first.output_text)
        in_flight = asyncio.create_task(hub.call(invocation("Mcp.notes.hang", workspace=workspace)))
        await announced.wait_for("hang")
        os.kill(first_pid, signal.SIGKILL)
        died = await asyncio.wait_for(in_flight, 20)
        assert (died.status, died.error_code) == ("failed", "TOOL_EXECUTION_FAILED")
        assert died.error_message is not None
        assert "not retried" in died.error_message

        again = await hub.call(invocation("Mcp.notes.add", {"a": 1, "b": 1}, workspace=workspace))
        assert (again.status, again.output_text) == ("succeeded", "2")
        assert hub.starts("notes") == 2
        second_pid = int(
            (await hub.call(invocation("Mcp.notes.pid", workspace=workspace))).output_text
        )
        assert second_pid != first_pid
        # Killed between calls this time: the next call still finds a server.
        os.kill(second_pid, signal.SIGKILL)
        third = await hub.call(invocation("Mcp.notes.add", {"a": 2, "b": 2}, workspace=workspace))
        assert (third.status, third.output_text, hub.starts("notes")) == ("succeeded", "4", 3)
        third_pid = int(
            (await hub.call(invocation("Mcp.notes.pid", workspace=workspace))).output_text
        )
    closed = await hub.call(invocation("Mcp.notes.add", {"a": 1, "b": 1}, workspace=workspace))
    assert (closed.status, closed.error_code, hub.starts("notes")) == (
        "failed",
        "TOOL_EXECUTION_FAILED",
        3,
    )
    assert [call["tool"] for call in recorded(record)].count("hang") == 1
    for pid in (first_pid, second_pid, third_pid):
        assert process_gone(pid), pid


async def test_killed_http_server_reached_again_once_back(record: Path, workspace: Path) -> None:
    async with contextlib.AsyncExitStack() as closing, Announcements() as announced:
        with http_server(record, announced.path) as url:
            settings = McpServerSettings(name="notes", url=url, startup_timeout_s=30)
            hub = await closing.enter_async_context(McpHub([settings]))
            hang = invocation("Mcp.notes.hang", workspace=workspace)
            in_flight = asyncio.create_task(hub.call(hang))
            await announced.wait_for("hang")
        # Leaving the block killed the server in the middle of the call.
        died = await asyncio.wait_for(in_flight, 20)
        assert (died.status, died.error_code) == ("failed", "TOOL_EXECUTION_FAILED")
        assert died.error_message is not None
        assert "not retried" in died.error_message

        add = invocation("Mcp.notes.add", {"a": 3, "b": 4}, workspace=workspace)
        gone = await hub.call(add)
        assert (gone.status, gone.error_code) == ("failed", "TOOL_EXECUTION_FAILED")
        assert gone.error_message is not None
        assert "did not start" in gone.error_message
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        with http_server(record, port=port):
            back = await hub.call(add)
            assert (back.status, back.output_text) == ("succeeded", "7")
            assert hub.starts("notes") == 3


async def test_timeout_and_output_cut(hub: McpHub, workspace: Path) -> None:
    (workspace / "notes" / "long.txt").write_text("é" * 100, encoding="utf-8")
    cut = await hub.call(
        invocation(
            "Mcp.notes.read_note",
            {"path": "notes/long.txt"},
            workspace=workspace,
            max_output_bytes=11,
        )
    )
    assert (cut.status, cut.output_text, cut.truncated) == ("succeeded", "é" * 5, True)
    slow = await hub.call(invocation("Mcp.notes.hang", workspace=workspace, timeout_s=0.5))
    assert (slow.status, slow.error_code) == ("failed", "TOOL_EXECUTION_FAILED")
    assert slow.error_message is not None
    assert "did not answer within 0.5 s" in slow.error_message


async def test_tool_list_changed_is_listed_again(hub: McpHub, workspace: Path) -> None:
    assert "Mcp.notes.late" not in hub.capabilities()
    grown = await hub.call(invocation("Mcp.notes.grow", workspace=workspace))
    assert grown.status == "succeeded"
    late = await hub.wait_listed("Mcp.notes.late", timeout=20)
    assert late.description.provenance.trust == "untrusted"
    called = await hub.call(invocation("Mcp.notes.late", workspace=workspace))
    assert (called.status, called.output_text) == ("succeeded", "late")


async def test_hostile_description_is_data(hub: McpHub) -> None:
    """Listed verbatim and marked; what the hub offers is exactly the listed tools."""
    tool = hub.capabilities()["Mcp.notes.exfiltrate"]
    assert tool.description.text == HOSTILE_DESCRIPTION
    assert tool.description.provenance.trust == "untrusted"
    assert set(hub.capabilities()) == {f"Mcp.notes.{name}" for name in LISTED_TOOLS}


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1:8931/mcp",
        "http://example.com/mcp",
        "http://localhost:8931/mcp",
        "http://127.0.0.1.example.com/mcp",
        "http://0.0.0.0:8931/mcp",
        "file:///tmp/mcp.sock",
        "http://[::ffff:10.0.0.1]:8931/mcp",
    ],
)
def test_non_loopback_url_refused_at_settings_time(url: str) -> None:
    with pytest.raises(ValidationError, match=r"loopback|http"):
        McpServerSettings(name="remote", url=url)


def test_settings_format() -> None:
    assert McpServerSettings(name="local", url="http://127.0.0.1:8931/mcp").url
    assert McpServerSettings(name="local6", url="http://[::1]:8931/mcp").url
    with pytest.raises(ValidationError, match="exactly one"):
        McpServerSettings(name="both", command="srv", url="http://127.0.0.1:1/mcp")
    with pytest.raises(ValidationError, match="exactly one"):
        McpServerSettings(name="neither")
    with pytest.raises(ValidationError):
        McpServerSettings(name="Has.Dot", command="srv")
    with pytest.raises(ValueError, match="more than once"):
        McpHub([McpServerSettings(name="a", command="x"), McpServerSettings(name="a", command="y")])


_HOLDS_A_HUB = """
import asyncio, sys
from pathlib import Path
from actors.tools import McpHub
from tests.support.mcp_hub import invocation, stdio_settings

async def main() -> None:
    notes = stdio_settings("notes", Path(sys.argv[1]))
    lingering = notes.model_copy(update={"args": (*notes.args, "--linger")})
    async with McpHub([lingering]) as hub:
        pid = await hub.call(invocation("Mcp.notes.pid", workspace=Path(sys.argv[2])))
        print(pid.output_text, flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_a_stdio_server_dies_with_a_runtime_killed_outright(
    record: Path, workspace: Path
) -> None:
    """A server that does not end with its input outlived a tool runtime SIGKILLed (a review of
    the MCP servers `parley up` now starts): the kernel kills it with the runtime."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runtime = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _HOLDS_A_HUB, str(record), str(workspace),
        env=env, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert runtime.stdout is not None
        server_pid = int(await asyncio.wait_for(runtime.stdout.readline(), 60))
        server = os.pidfd_open(server_pid)
    finally:
        runtime.kill()
        await runtime.wait()
    try:
        gone = asyncio.Event()
        asyncio.get_running_loop().add_reader(server, gone.set)  # readable once it has exited
        await asyncio.wait_for(gone.wait(), 20)
    finally:
        asyncio.get_running_loop().remove_reader(server)
        with contextlib.suppress(ProcessLookupError):  # a failed run leaves nothing either
            signal.pidfd_send_signal(server, signal.SIGKILL)
        os.close(server)
