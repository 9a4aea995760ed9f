"""Helpers for the MCP tool tests: the test server's settings over stdio and over streamable
HTTP (a real process each), invocations, and what the server recorded of its calls."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

from actors.tools import McpServerSettings, ToolInvocation
from schemas import Capability
from tests.support.processes import REPO, ProcessOutput

SERVER_MODULE = "tests.support.mcp_tools_server"
LISTED_TOOLS = frozenset({"add", "read_note", "fail", "exfiltrate", "hang", "grow", "pid"})
"""The test server's tools the hub offers (its dotted `Shell.Exec` is not one of them)."""


def stdio_settings(name: str, record: Path, announce: str | None = None) -> McpServerSettings:
    told = ("--announce", announce) if announce else ()
    return McpServerSettings(
        name=name,
        command=sys.executable,
        args=("-m", SERVER_MODULE, "--record", str(record), *told),
        cwd=str(REPO),
        startup_timeout_s=30,
    )


@contextlib.contextmanager
def http_server(record: Path, announce: str | None = None, port: int = 0) -> Iterator[str]:
    """The test server over streamable HTTP on a loopback port (a free one for 0); yields its
    URL. It is killed on the way out."""
    told = ("--announce", announce) if announce else ()
    server = ProcessOutput(
        [sys.executable, "-m", SERVER_MODULE, "--http", str(port), "--record", str(record), *told],
        env=os.environ,
        name="mcp-http",
    )
    try:
        _, line = server.wait_line_sync(r"^serving http://127\.0\.0\.1:\d+/mcp$", timeout=30)
        yield line.split()[1]
    finally:
        server.close()


def invocation(
    capability: str,
    arguments: dict[str, Any] | None = None,
    *,
    workspace: Path,
    timeout_s: float = 20.0,
    **scope: Any,
) -> ToolInvocation:
    return ToolInvocation(
        capability=capability,
        arguments=arguments or {},
        scope=Capability(name=scope.pop("scope_name", capability), **scope),
        workspace=workspace,
        session_id="session-1",
        step_id="step-1",
        timeout_s=timeout_s,
    )


def recorded(record: Path) -> list[dict[str, Any]]:
    """Every call the server received, in order."""
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]


class Announcements:
    """Calls as the server announces them on a Unix socket, each as it arrives."""

    def __init__(self) -> None:
        self._directory = tempfile.TemporaryDirectory(prefix="mcp-")
        self.path = str(Path(self._directory.name) / "calls.sock")
        self._calls: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_unix_server(self._told, self.path)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self._directory.cleanup()

    async def _told(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            await self._calls.put(json.loads(line))
        writer.close()

    async def wait_for(self, tool: str, *, timeout: float = 20.0) -> dict[str, Any]:
        """The next announced call of `tool` (earlier calls of other tools are skipped)."""
        async with asyncio.timeout(timeout):
            while (call := await self._calls.get())["tool"] != tool:
                pass
        return call


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
