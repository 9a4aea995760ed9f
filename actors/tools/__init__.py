"""The tool runtime: runs tool requests within their capability's scope, contained (seed 002
§3.2, §9, §13). Built-in capabilities are File, Shell, Network, Git and Workspace tools; MCP
servers' tools are capabilities of their own."""

from typing import TYPE_CHECKING

from actors.tools._admission import admit_request
from actors.tools._approvals import approval_risk, approval_summary, approval_title
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
from actors.tools._artifact_uris import SCHEME, ArtifactUri, BadArtifactUri, session_key
from actors.tools._artifacts import (
    ArtifactCorrupt,
    ArtifactNotFound,
    ArtifactShareExceeded,
    ArtifactStore,
    ArtifactStoreError,
    artifacts_bucket,
    stored_bytes,
)
from actors.tools._checkpoints import CHANGING, patch_preview, workspace_patch
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
from actors.tools._mcp_scope import PATH_ARGUMENT_NAMES
from actors.tools._mcp_settings import McpServerSettings, McpTool, UntrustedText, mcp_capability
from actors.tools._paths import check_path
from actors.tools._pending import PendingApproval, decode_pending, pending_key
from actors.tools._scopes import check_request, check_size, narrow_scope
from actors.tools._shell import DEFAULT_MAX_OUTPUT_BYTES, execute_shell
from actors.tools._step_records import StepRecords
from actors.tools._upload import DEFAULT_MAX_UPLOAD_BYTES, execute_workspace_upload
from actors.tools._workspace_owner import workspace_name, workspace_owner
from bus import lazy_exports

if TYPE_CHECKING:
    from actors.tools._actor import ToolsActor
    from actors.tools._mcp import McpHub

# The MCP SDK only for the runtime's own process: the gate reads scopes and summaries.
__getattr__ = lazy_exports(
    __name__, {"ToolsActor": "actors.tools._actor", "McpHub": "actors.tools._mcp"}
)

__all__ = (
    "ARGUMENTS",
    "BUILT_IN_CAPABILITIES",
    "CHANGING",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_MAX_UPLOAD_BYTES",
    "GIT_EXECUTORS",
    "PATH_ARGUMENT_NAMES",
    "SCHEME",
    "SHELL_PATH",
    "ArtifactCorrupt",
    "ArtifactNotFound",
    "ArtifactShareExceeded",
    "ArtifactStore",
    "ArtifactStoreError",
    "ArtifactUri",
    "BadArtifactUri",
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
    "PendingApproval",
    "Provenance",
    "ScopeDenied",
    "ShellExec",
    "ShellLimits",
    "ShellRun",
    "StepRecords",
    "ToolInvocation",
    "ToolOutcome",
    "ToolsActor",
    "UntrustedText",
    "WorkspaceUpload",
    "admit_request",
    "approval_risk",
    "approval_summary",
    "approval_title",
    "arguments_schema",
    "artifacts_bucket",
    "check_command",
    "check_path",
    "check_request",
    "check_size",
    "check_url",
    "decode_arguments",
    "decode_pending",
    "execute_git_commit",
    "execute_git_diff",
    "execute_git_push",
    "execute_git_status",
    "execute_http",
    "execute_shell",
    "execute_workspace_upload",
    "mcp_capability",
    "narrow_scope",
    "patch_preview",
    "pending_key",
    "push_url_allowed",
    "run_contained",
    "session_key",
    "stored_bytes",
    "workspace_name",
    "workspace_owner",
    "workspace_patch",
)
