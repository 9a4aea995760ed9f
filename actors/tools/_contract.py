"""What every tool executor of the tool runtime takes and gives, whatever the capability.

The tool runtime (`parley run tools`) receives a `tool_request` from the gate, finds the
capability's scope in the signed bundle, checks the request against it again (the gate
checked it first; the runtime trusts no earlier check), and hands one `ToolInvocation` to
the capability's executor. The executor does the work, contained, and says what came of it
in a `ToolOutcome`, which becomes the `tool_result` (seed 002 §13.3).

An executor refuses what its scope does not allow by raising `ScopeDenied` (the caller gets
a `denied` result with the code), and reports a failure of the work itself (a command that
exits non-zero is not one: that is a succeeded run with its exit code) as a `failed`
outcome. Nothing an executor reads from the outside world (a file, a command's output, an
HTTP body, an MCP tool's description or result) ever changes its scope: it is returned as
data with its provenance.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from schemas import Capability, ErrorCode

if TYPE_CHECKING:
    from actors.tools._artifacts import ArtifactStore
    from bus import Payer

__all__ = (
    "BUILT_IN_CAPABILITIES",
    "Executor",
    "Provenance",
    "ScopeDenied",
    "ToolInvocation",
    "ToolOutcome",
)

BUILT_IN_CAPABILITIES: Final = (
    "File.Read",
    "File.Write",
    "File.Delete",
    "Shell.Exec",
    "Network.Http",
    "Git.Status",
    "Git.Diff",
    "Git.Commit",
    "Git.Push",
    "Workspace.Upload",
)
"""Seed 002 §9's capabilities that the runtime executes itself (`LLM.Call` is the LLM
gateway's; `BackendTool.Invoke` and MCP tools are named `Mcp.<server>.<tool>`)."""


@dataclass(frozen=True, slots=True)
class ToolInvocation:
    """One tool run asked for, as its executor sees it.

    `workspace` is the session's own directory (created before the call): relative paths in
    `arguments` and in the scope are relative to it, and a command runs in it.
    """

    capability: str
    arguments: dict[str, Any]
    scope: Capability
    workspace: Path
    session_id: str
    step_id: str
    environment: dict[str, str] = field(default_factory=dict)
    """The only environment variables a command may see (the profile names them)."""
    timeout_s: float = 30.0
    """Wall-clock limit of the run; past it the executor stops the work and fails."""
    artifacts: ArtifactStore | None = None
    """The tenant's artifact store, where Workspace.Upload puts a file (None: not open)."""
    payers: tuple[Payer, ...] = ()
    """Whom what the step stores is charged to: the person its trace works for and the agent
    that asked for it (bus/_shares.py)."""


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a tool's output came from, so a model is shown it as data (seed 002 §19.4)."""

    source: str
    """The capability or MCP tool that produced it."""
    locator: str = ""
    """The path, command line or URL it was read from."""
    trust: Literal["untrusted", "workspace", "trusted"] = "untrusted"


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What a run produced; `failed` carries an error code and message."""

    status: Literal["succeeded", "failed"]
    output_text: str = ""
    truncated: bool = False
    """The output was cut at the scope's `max_output_bytes` (the rest was dropped)."""
    error_code: str | None = None
    error_message: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    """Facts of the run a caller may want: an exit code, a byte count, a commit id."""
    provenance: Provenance | None = None
    artifact_uris: tuple[str, ...] = ()
    """Artifacts the run stored (actors/tools/_artifact_uris.py): an uploaded file, an output
    too large for a message, a checkpoint's diff."""


class ScopeDenied(Exception):
    """The request is outside its capability's scope; nothing was done.

    `code` is the error code the caller sees (`CAPABILITY_DENIED` for a scope, or
    `APPROVAL_REQUIRED`), `rule` the scope field that refused (`allowed_paths`,
    `blocked_commands`, `allowed_domains`, `max_file_size_bytes`, ...).
    """

    def __init__(
        self, rule: str, message: str, code: ErrorCode = ErrorCode.CAPABILITY_DENIED
    ) -> None:
        super().__init__(message)
        self.rule = rule
        self.code = code


Executor = Callable[[ToolInvocation], Awaitable[ToolOutcome]]
"""Runs one invocation of one capability; raises `ScopeDenied` for what its scope refuses."""
