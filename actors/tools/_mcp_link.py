"""One MCP server's connection: started, initialised and listed with the `mcp` SDK's client,
watched for its end, and restarted when it has died.

The SDK's transports and `ClientSession` are anyio context managers that must be left by the
task that entered them, so each connection lives in a task of its own (`_run`), which holds
them open until it is told to stop or the transport ends; calls from any task use its session.
The transport's read stream passes through a forwarder, which marks the link closed the
moment the server's output ends (a stdio server that died) so the next call restarts it
instead of writing to a dead pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from typing import Final

import anyio
import httpx2
import mcp.types as mcp_types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client._transport import ReadStream, TransportStreams
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from actors.tools._contract import Provenance
from actors.tools._mcp_settings import (
    TOOL_NAME,
    McpServerSettings,
    McpTool,
    UntrustedText,
    mcp_capability,
)
from bus import PYTHON_PLACEHOLDER, owned_argv

__all__ = ("McpLink", "McpUnavailable")

log = logging.getLogger("parley.actors.tools.mcp")

CLIENT_INFO: Final = mcp_types.Implementation(name="parley-tools", version="1")
STOP_TIMEOUT_S: Final = 10.0
"""Bound on closing one server: the SDK closes its stdin, then SIGTERMs and SIGKILLs its
process group, each step bounded (about 6 s at worst)."""


class McpUnavailable(Exception):
    """The server could not be started, reached, initialised or listed."""


class McpLink:
    """The hub's connection to one server; `session` is None while it is down."""

    def __init__(self, settings: McpServerSettings, on_listed: asyncio.Condition) -> None:
        self.settings = settings
        self.session: ClientSession | None = None
        self.tools: dict[str, McpTool] = {}
        self.starts = 0
        """How many times the server was started (or reached): 1 plus its restarts."""
        self._on_listed = on_listed
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stopping = False
        self.ended = asyncio.Event()
        """Set when this connection ends (its server's output ended, a call found it closed,
        or it was stopped); each start makes a new one, so an old connection's end never
        marks its successor."""
        self.ended.set()
        self.lock = asyncio.Lock()
        """Held while (re)starting, so concurrent calls start one server, not several."""

    @property
    def alive(self) -> bool:
        return self.session is not None and not self.ended.is_set()

    async def start(self) -> None:
        """Start (or reach) the server and list its tools, within its startup bound.

        Raises:
            McpUnavailable: it did not come up; nothing of it is left running.
        """
        await self.stop()
        self._stopping = False
        self.ended = asyncio.Event()
        self._wake = asyncio.Event()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(
            self._run(ready, self.ended), name=f"mcp-{self.settings.name}"
        )
        self.starts += 1
        try:
            async with asyncio.timeout(self.settings.startup_timeout_s):
                await asyncio.shield(ready)
        except TimeoutError:
            await self.stop()
            raise McpUnavailable(
                f"MCP server {self.settings.name!r} did not start within "
                f"{self.settings.startup_timeout_s:g} s"
            ) from None
        except Exception as exc:
            await self.stop()
            raise McpUnavailable(
                f"MCP server {self.settings.name!r} did not start: {_describe(exc)}"
            ) from None

    async def stop(self) -> None:
        """Close the session and the transport (a stdio server's process is ended)."""
        task, self._task = self._task, None
        self.session = None
        self.ended.set()
        if task is None:
            return
        self._stopping = True
        self._wake.set()
        done, _ = await asyncio.wait({task}, timeout=STOP_TIMEOUT_S)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_TIMEOUT_S)

    def mark_dead(self, session: ClientSession | None = None) -> None:
        """The connection failed under a call: the next call starts the server again.
        `session`: the one the call failed on; a late failure of a connection already
        replaced (calls run at once) leaves the new one alone."""
        if session is not None and session is not self.session:
            return
        self.ended.set()
        self._wake.set()

    async def _run(self, ready: asyncio.Future[None], ended: asyncio.Event) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport(stack))
                forwarded_send, forwarded = anyio.create_memory_object_stream[
                    SessionMessage | Exception
                ](0)
                group = await stack.enter_async_context(anyio.create_task_group())
                group.start_soon(self._forward, read, forwarded_send, ended)
                session = await stack.enter_async_context(
                    ClientSession(
                        forwarded, write, message_handler=self._on_message, client_info=CLIENT_INFO
                    )
                )
                await session.initialize()
                await self._list(session)
                self.session = session
                ready.set_result(None)
                while not self._stopping and not ended.is_set():
                    await self._wake.wait()
                    self._wake.clear()
                    if not self._stopping and not ended.is_set():
                        await self._relist(session)
                group.cancel_scope.cancel()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            elif not self._stopping:
                log.warning("MCP server %r ended: %s", self.settings.name, _describe(exc))
        finally:
            if self.ended is ended:
                self.session = None
            ended.set()
            if not ready.done():
                ready.set_exception(McpUnavailable("the connection ended before it was ready"))

    def _transport(
        self, stack: contextlib.AsyncExitStack
    ) -> contextlib.AbstractAsyncContextManager[TransportStreams]:
        settings = self.settings
        if settings.command is not None:
            program = sys.executable if settings.command == PYTHON_PLACEHOLDER else settings.command
            # Through `owned_argv`: the kernel kills the server with a runtime SIGKILLed, which
            # never closes its stdin (a server that waits for that outlived it).
            command, *args = owned_argv([program, *settings.args])
            return stdio_client(
                StdioServerParameters(
                    command=command,
                    args=args,
                    env=dict(settings.env),
                    cwd=settings.cwd,
                )
            )
        url = settings.url or ""
        # trust_env=False: no proxy from the environment may stand between us and loopback.
        client = httpx2.AsyncClient(
            trust_env=False, timeout=httpx2.Timeout(30.0, read=300.0), follow_redirects=False
        )
        stack.push_async_callback(client.aclose)
        return streamable_http_client(url, http_client=client)

    async def _forward(
        self,
        source: ReadStream[SessionMessage | Exception],
        sink: anyio.abc.ObjectSendStream[SessionMessage | Exception],
        ended: asyncio.Event,
    ) -> None:
        """Pass the server's messages on; when they end, the server is gone."""
        async with sink:
            try:
                async for message in source:
                    await sink.send(message)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
                pass
        ended.set()
        self._wake.set()

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._wake.set()

    async def _relist(self, session: ClientSession) -> None:
        try:
            async with asyncio.timeout(self.settings.startup_timeout_s):
                await self._list(session)
        except Exception as exc:
            log.warning("MCP server %r: listing tools again failed: %s", self.settings.name, exc)

    async def _list(self, session: ClientSession) -> None:
        """Read every page of the server's tools; names the hub cannot offer are skipped."""
        tools: dict[str, McpTool] = {}
        cursor: str | None = None
        while True:
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            for tool in page.tools:
                if not TOOL_NAME.fullmatch(tool.name):
                    log.warning(
                        "MCP server %r: tool %r skipped: its name is not [A-Za-z0-9_-]{1,128}",
                        self.settings.name,
                        tool.name,
                    )
                    continue
                capability = mcp_capability(self.settings.name, tool.name)
                tools[tool.name] = McpTool(
                    capability=capability,
                    server=self.settings.name,
                    tool=tool.name,
                    input_schema=dict(tool.input_schema),
                    description=UntrustedText(
                        text=tool.description or "",
                        provenance=Provenance(
                            source=capability, locator="tools/list", trust="untrusted"
                        ),
                    ),
                )
            cursor = page.next_cursor
            if not cursor:
                break
        self.tools = tools
        async with self._on_listed:
            self._on_listed.notify_all()


def _describe(exc: BaseException) -> str:
    """One line for an error, the first leaf of an exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
