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
from actors.tools._shell import DEFAULT_MAX_OUTPUT_BYTES, execute_shell

__all__ = (
    "ARGUMENTS",
    "BUILT_IN_CAPABILITIES",
    "DEFAULT_MAX_OUTPUT_BYTES",
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
    "Provenance",
    "ScopeDenied",
    "ShellExec",
    "ShellLimits",
    "ShellRun",
    "ToolInvocation",
    "ToolOutcome",
    "WorkspaceUpload",
    "arguments_schema",
    "decode_arguments",
    "execute_shell",
    "run_contained",
)
