"""MCP servers as tools: every tool of every configured server is a capability
`Mcp.<server>.<tool>`, called like a built-in one (seed 002 §9, §13; issue item 5).

`McpHub` starts (stdio) or reaches (streamable HTTP on loopback) each server named in the
runtime's settings with the official `mcp` SDK, lists its tools, and runs one
`ToolInvocation` at a time per call. What a server says is untrusted: a tool's description
is kept as marked data (`UntrustedText`), a result is returned as text with an untrusted
provenance, and neither is ever read to decide anything. What a profile may call is the
signed bundle's alone (`effective_scope`); the hub only refuses what the scope it is handed
does not allow (path arguments, see actors/tools/_mcp_scope.py).

A server that dies is started again by the next call. The call in flight when it died fails
with `TOOL_EXECUTION_FAILED` and is not retried: the tool may have acted before the server
died, and a tool step runs at most once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from types import TracebackType
from typing import Final, Self

import mcp.types as mcp_types
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from actors.tools._contract import Provenance, ScopeDenied, ToolInvocation, ToolOutcome
from actors.tools._mcp_link import McpLink, McpUnavailable, log
from actors.tools._mcp_scope import scoped_arguments
from actors.tools._mcp_settings import McpServerSettings, McpTool, split_mcp_capability
from schemas import ErrorCode

__all__ = ("DEFAULT_MAX_OUTPUT_BYTES", "McpHub")

DEFAULT_MAX_OUTPUT_BYTES: Final = 1 << 20
"""The output kept when the scope sets no `max_output_bytes`: a server cannot make the
runtime hold an unbounded answer."""
PING_TIMEOUT_S: Final = 2.0
"""Before each call the server is pinged: a dead one fails the ping at once (its connection
is closed) and is restarted; a busy one that does not answer in time is called anyway."""


class McpHub:
    """Every configured MCP server, started on entry and closed on exit.

    ```
    async with McpHub(settings) as hub:
        hub.capabilities()      # {"Mcp.notes.read_note": McpTool(...), ...}
        await hub.call(invocation)
    ```
    """

    def __init__(self, servers: Sequence[McpServerSettings]) -> None:
        names = [server.name for server in servers]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"MCP servers named more than once: {', '.join(duplicates)}")
        self._listed = asyncio.Condition()
        self._links = {server.name: McpLink(server, self._listed) for server in servers}
        self._closed = False
        """Once closed, a call fails rather than start a server no one will stop."""

    async def __aenter__(self) -> Self:
        """Start every server; one that does not come up is logged and retried on its first
        call, so one broken server does not keep the others' tools away."""
        results = await asyncio.gather(
            *(link.start() for link in self._links.values()), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                log.warning("%s", result)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        await asyncio.gather(*(link.stop() for link in self._links.values()))

    def capabilities(self) -> dict[str, McpTool]:
        """Every tool the running servers listed, by capability name (a listing, not a grant)."""
        return {
            tool.capability: tool for link in self._links.values() for tool in link.tools.values()
        }

    def starts(self, server: str) -> int:
        """How many times `server` was started or reached (1 plus its restarts)."""
        return self._links[server].starts

    async def wait_listed(self, capability: str, *, timeout: float) -> McpTool:
        """The tool once a listing (the first, or one after `tools/list_changed`) has it.

        Raises:
            TimeoutError: no listing had it within `timeout` seconds.
        """
        async with asyncio.timeout(timeout), self._listed:
            await self._listed.wait_for(lambda: capability in self.capabilities())
            return self.capabilities()[capability]

    async def call(self, invocation: ToolInvocation) -> ToolOutcome:
        """Run one MCP tool call within its scope and timeout.

        Raises:
            ScopeDenied: a path argument outside the scope, or a scope of another capability;
                the server was not called.
        """
        if self._closed:
            return _failed("the MCP hub is closed", Provenance(source=invocation.capability))
        named = split_mcp_capability(invocation.capability)
        link = self._links.get(named[0]) if named else None
        if named is None or link is None:
            return _not_found(invocation.capability, "no configured MCP server has it")
        server, tool_name = named
        provenance = Provenance(source=invocation.capability, trust="untrusted")
        if invocation.scope.name not in (invocation.capability, f"Mcp.{server}.*"):
            raise ScopeDenied(
                "name", f"the scope {invocation.scope.name!r} is not {invocation.capability!r}'s"
            )
        try:
            session = await self._live_session(link)
        except McpUnavailable as exc:
            return _failed(str(exc), provenance)
        tool = link.tools.get(tool_name)
        if tool is None:
            return _not_found(invocation.capability, f"server {server!r} lists no such tool")
        arguments = scoped_arguments(
            invocation.arguments, tool.input_schema, invocation.scope, invocation.workspace
        )
        try:
            async with asyncio.timeout(invocation.timeout_s):
                result = await session.call_tool(tool_name, arguments)
        except TimeoutError:
            return _failed(
                f"{invocation.capability} did not answer within {invocation.timeout_s:g} s",
                provenance,
            )
        except MCPError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED:
                link.mark_dead(session)
                return _died(invocation.capability, str(exc), provenance)
            return _failed(f"{invocation.capability}: {exc.message}", provenance)
        except Exception as exc:
            link.mark_dead(session)
            return _died(invocation.capability, f"{type(exc).__name__}: {exc}", provenance)
        limit = invocation.scope.max_output_bytes
        text, truncated = _cut(
            _result_text(result), DEFAULT_MAX_OUTPUT_BYTES if limit is None else limit
        )
        if result.is_error:
            return ToolOutcome(
                status="failed",
                output_text=text,
                truncated=truncated,
                error_code=ErrorCode.TOOL_EXECUTION_FAILED.value,
                error_message=f"{invocation.capability} reported an error",
                provenance=provenance,
            )
        return ToolOutcome(
            status="succeeded", output_text=text, truncated=truncated, provenance=provenance
        )

    async def _live_session(self, link: McpLink) -> ClientSession:
        """The link's session, restarting its server first when it has died."""
        async with link.lock:
            if link.alive and link.session is not None:
                try:
                    async with asyncio.timeout(PING_TIMEOUT_S):
                        await link.session.send_ping()
                except TimeoutError:
                    pass  # busy, not dead: the call is bounded by its own timeout
                except MCPError as exc:
                    if exc.code == mcp_types.CONNECTION_CLOSED:
                        link.mark_dead()
                except Exception:
                    link.mark_dead()  # the transport itself failed
            if not link.alive:
                log.info("MCP server %r is down: starting it", link.settings.name)
                await link.start()
            if link.session is None:
                raise McpUnavailable(f"MCP server {link.settings.name!r} is not running")
            return link.session


def _result_text(result: mcp_types.CallToolResult) -> str:
    """The result's text content; other content is summarised, never decoded."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            parts.append(f"[{block.type}: {block.mime_type}, {len(block.data)} base64 characters]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource link: {block.uri}]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, mcp_types.TextResourceContents):
                parts.append(resource.text)
            else:
                parts.append(f"[resource: {resource.uri}, {resource.mime_type or 'binary'}]")
        else:
            parts.append(f"[{getattr(block, 'type', type(block).__name__)} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _cut(text: str, limit: int) -> tuple[str, bool]:
    """At most `limit` bytes of UTF-8, never splitting a character."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text, False
    return data[:limit].decode("utf-8", errors="ignore"), True


def _failed(message: str, provenance: Provenance) -> ToolOutcome:
    return ToolOutcome(
        status="failed",
        error_code=ErrorCode.TOOL_EXECUTION_FAILED.value,
        error_message=message,
        provenance=provenance,
    )


def _died(capability: str, reason: str, provenance: Provenance) -> ToolOutcome:
    return _failed(
        f"{capability}: the server's connection ended during the call ({reason}); the call is "
        "not retried (the tool may have acted); the server is started (or reached) again on the "
        "next call",
        provenance,
    )


def _not_found(capability: str, why: str) -> ToolOutcome:
    return ToolOutcome(
        status="failed",
        error_code=ErrorCode.TOOL_NOT_FOUND.value,
        error_message=f"{capability!r}: {why}",
        provenance=Provenance(source=capability, trust="untrusted"),
    )
