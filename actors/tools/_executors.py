"""The capabilities this tool runtime runs itself, and which of them may run twice.

MCP servers' tools are added at start (actors/tools/_mcp.py); these are the built-in ones. A
step a crash cut short is run again only if its capability changes nothing (`is_read_only`):
anything else ends `failed`, "interrupted", since whether its effect happened is unknown.
"""

from __future__ import annotations

from actors.tools._contract import Executor
from actors.tools._files import execute_file_delete, execute_file_read, execute_file_write
from actors.tools._git import GIT_EXECUTORS
from actors.tools._http import execute_http
from actors.tools._shell import execute_shell
from actors.tools._upload import execute_workspace_upload
from schemas import ToolRequest

__all__ = ("BUILT_IN_EXECUTORS", "READ_ONLY", "is_read_only")

BUILT_IN_EXECUTORS: dict[str, Executor] = {
    "File.Read": execute_file_read,
    "File.Write": execute_file_write,
    "File.Delete": execute_file_delete,
    "Network.Http": execute_http,
    "Shell.Exec": execute_shell,
    "Workspace.Upload": execute_workspace_upload,
    **GIT_EXECUTORS,
}
"""The executor of each capability this runtime runs itself."""

READ_ONLY = frozenset({"File.Read", "Git.Status", "Git.Diff"})
"""Capabilities whose step may run again after a crash cut it short: they change nothing."""


def is_read_only(request: ToolRequest) -> bool:
    """Whether running `request` twice changes nothing (an HTTP GET or HEAD does not)."""
    if request.tool_name == "Network.Http":
        return str(request.arguments.get("method", "GET")) in ("GET", "HEAD")
    return request.tool_name in READ_ONLY
