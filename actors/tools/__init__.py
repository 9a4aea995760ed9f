"""The tool runtime: runs tool requests within their capability's scope, contained (seed 002
§3.2, §9, §13). Built-in capabilities are File, Shell, Network, Git and Workspace tools; MCP
servers' tools are capabilities of their own."""

from actors.tools._actor import ToolsActor
from actors.tools._admission import admit_request
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
from actors.tools._commands import check_command
from actors.tools._confinement import ShellLimits
from actors.tools._contained import SHELL_PATH, ShellRun, run_contained
from actors.tools._contract import (
    BUILT_IN_CAPABILITIES,
    Executor,
    Provenance,
    ScopeDenied,
    ToolInvocation,
    ToolOutcome,
)
from actors.tools._git import (
    GIT_EXECUTORS,
    execute_git_commit,
    execute_git_diff,
    execute_git_push,
    execute_git_status,
    push_url_allowed,
)
from actors.tools._http import check_url, execute_http
from actors.tools._mcp import McpHub
from actors.tools._mcp_scope import PATH_ARGUMENT_NAMES
from actors.tools._mcp_settings import McpServerSettings, McpTool, UntrustedText, mcp_capability
from actors.tools._paths import check_path
from actors.tools._scopes import check_request, check_size, narrow_scope
from actors.tools._shell import DEFAULT_MAX_OUTPUT_BYTES, execute_shell

__all__ = (
    "ARGUMENTS",
    "BUILT_IN_CAPABILITIES",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "GIT_EXECUTORS",
    "PATH_ARGUMENT_NAMES",
    "SHELL_PATH",
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
    "ShellLimits",
    "ShellRun",
    "ToolInvocation",
    "ToolOutcome",
    "ToolsActor",
    "UntrustedText",
    "WorkspaceUpload",
    "admit_request",
    "arguments_schema",
    "check_command",
    "check_path",
    "check_request",
    "check_size",
    "check_url",
    "decode_arguments",
    "execute_git_commit",
    "execute_git_diff",
    "execute_git_push",
    "execute_git_status",
    "execute_http",
    "execute_shell",
    "mcp_capability",
    "narrow_scope",
    "push_url_allowed",
    "run_contained",
)
