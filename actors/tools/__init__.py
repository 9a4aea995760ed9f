"""The tool runtime: runs tool requests within their capability's scope, contained (seed 002
§3.2, §9, §13). Built-in capabilities are File, Shell, Network, Git and Workspace tools; MCP
servers' tools are capabilities of their own."""

from actors.tools._arguments import (
    ARGUMENTS,
    FileDelete,
    FileRead,
    FileWrite,
    GitCommit,
    GitDiff,
    GitPush,
    GitStatus,
    HttpRequest,
    InvalidArguments,
    ShellExec,
    WorkspaceUpload,
    arguments_schema,
    decode_arguments,
)
from actors.tools._contract import (
    BUILT_IN_CAPABILITIES,
    Executor,
    Provenance,
    ScopeDenied,
    ToolInvocation,
    ToolOutcome,
)
from actors.tools._mcp import McpHub
from actors.tools._mcp_scope import PATH_ARGUMENT_NAMES
from actors.tools._mcp_settings import McpServerSettings, McpTool, UntrustedText, mcp_capability

__all__ = (
    "ARGUMENTS",
    "BUILT_IN_CAPABILITIES",
    "PATH_ARGUMENT_NAMES",
    "Executor",
    "FileDelete",
    "FileRead",
    "FileWrite",
    "GitCommit",
    "GitDiff",
    "GitPush",
    "GitStatus",
    "HttpRequest",
    "InvalidArguments",
    "McpHub",
    "McpServerSettings",
    "McpTool",
    "Provenance",
    "ScopeDenied",
    "ShellExec",
    "ToolInvocation",
    "ToolOutcome",
    "UntrustedText",
    "WorkspaceUpload",
    "arguments_schema",
    "decode_arguments",
    "mcp_capability",
)
