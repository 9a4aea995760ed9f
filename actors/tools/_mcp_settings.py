"""How the tool runtime's settings name an MCP server, and what one of its tools looks like.

A server is reached in one of two ways: run as a child process that speaks MCP on its stdio
(`command`, `args`, `env`, `cwd`), or reached over streamable HTTP at a `url` on this
machine's loopback. A remote URL is refused when the settings are read: an MCP server is a
tool the runtime executes on the session's behalf, and a server elsewhere would receive the
session's arguments (paths, contents) over a network no scope governs.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Final, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from actors.tools._contract import Provenance

__all__ = (
    "MCP_CAPABILITY_PREFIX",
    "McpServerSettings",
    "McpTool",
    "UntrustedText",
    "mcp_capability",
    "split_mcp_capability",
)

MCP_CAPABILITY_PREFIX: Final = "Mcp."

SERVER_NAME: Final = r"^[a-z0-9_-]{1,64}$"
"""A server's name is one token of a capability name and of a subject: no dots, no spaces."""

TOOL_NAME: Final = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
"""The tool names the hub offers: MCP allows dots too, but a dot would make
`Mcp.<server>.<tool>` ambiguous (and `Mcp.<server>.*` match across servers)."""


class McpServerSettings(BaseModel):
    """One MCP server in the tool runtime's settings: either `command` or `url`, never both."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=SERVER_NAME)
    """Its tools are the capabilities `Mcp.<name>.<tool>`."""
    command: str | None = None
    """The program to run (stdio transport); `{python}` is the interpreter running the tool
    runtime, so a server written in Python with the `mcp` SDK finds it installed."""
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    """The only variables the server sees beyond the SDK's short safe list (HOME, LOGNAME,
    PATH, SHELL, TERM, USER): the runtime's own environment, credentials included, is not
    passed on."""
    cwd: str | None = None
    url: str | None = None
    """A streamable HTTP endpoint on a loopback address, such as `http://127.0.0.1:8931/mcp`."""
    startup_timeout_s: float = Field(default=15.0, gt=0, le=300)
    """Bound on starting (or reaching) the server, initialising and listing its tools."""

    @model_validator(mode="after")
    def _one_transport(self) -> Self:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                f"MCP server {self.name!r}: give either `command` (stdio) or `url` "
                "(streamable HTTP), exactly one"
            )
        if self.url is not None:
            if self.args or self.env or self.cwd is not None:
                raise ValueError(
                    f"MCP server {self.name!r}: `args`, `env` and `cwd` are for a `command`, "
                    "not a `url`"
                )
            _require_loopback(self.name, self.url)
        return self


def _require_loopback(server: str, url: str) -> None:
    """Refuse a URL whose host is not a literal loopback address (127.0.0.0/8 or ::1).

    A host name, `localhost` included, is refused too: what it resolves to is decided
    outside the signed policy (a hosts file, a resolver) and can change after this check.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"MCP server {server!r}: url {url!r} is not http:// or https://")
    host = parts.hostname or ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(
            f"MCP server {server!r}: url {url!r} is not on a loopback address; only "
            "127.0.0.0/8 or [::1] written as an address is allowed (e.g. http://127.0.0.1:8931/mcp)"
        )


@dataclass(frozen=True, slots=True)
class UntrustedText:
    """Text a server wrote, kept as data: shown to a model or a person as it is, never read
    as an instruction, never used to decide what is allowed."""

    text: str
    provenance: Provenance


@dataclass(frozen=True, slots=True)
class McpTool:
    """One tool of one server, as listed by it, under its capability name."""

    capability: str
    server: str
    tool: str
    input_schema: dict[str, Any]
    """The arguments' JSON Schema, as the server gave it (offered to a brain; it can add
    path checks, never remove one)."""
    description: UntrustedText
    """The server's description of the tool: untrusted text, whatever it says."""


def mcp_capability(server: str, tool: str) -> str:
    return f"{MCP_CAPABILITY_PREFIX}{server}.{tool}"


def split_mcp_capability(capability: str) -> tuple[str, str] | None:
    """(server, tool) of `Mcp.<server>.<tool>`, or None when it is not such a name."""
    if not capability.startswith(MCP_CAPABILITY_PREFIX):
        return None
    server, dot, tool = capability[len(MCP_CAPABILITY_PREFIX) :].partition(".")
    if not dot or not re.fullmatch(SERVER_NAME, server) or not TOOL_NAME.fullmatch(tool):
        return None
    return server, tool
