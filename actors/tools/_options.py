"""The tool runtime's `[options]`, validated at start like every actor's."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from actors.tools._mcp_settings import McpServerSettings

__all__ = ("ToolsOptions",)


class ToolsOptions(BaseModel):
    """The tool runtime's `[options]`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy_keys: list[str] = Field(min_length=1)
    """The policy signers' public keys: the runtime verifies the bundle itself, as the gate
    does, and trusts no scope it did not read from a bundle it verified."""
    tenant: str = "default"
    """The tenant whose bundles this runtime accepts."""
    workspaces: str = ".parley/workspaces"
    """Where each session's workspace directory is made (`<workspaces>/<session>`)."""
    timeout_s: float = Field(default=60.0, gt=0, le=540)
    """The longest one step may run (a command's own `timeout_s` may only shorten it); below
    the ten minutes the bus vouches for a message in hand, so a running step is never
    redelivered to another handler."""
    environment: dict[str, str] = {}
    """The only environment variables a command sees (besides a fixed PATH, HOME and LANG)."""
    mcp_servers: list[McpServerSettings] = []
    """MCP servers whose tools are capabilities `Mcp.<server>.<tool>` (docs/tools.md)."""

    @field_validator("policy_keys", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value
