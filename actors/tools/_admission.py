"""Whether a tool request's arguments fit its scope: the one check the gate (lexically, before
delivery) and the runtime (on the real file system, before running) both make.

Built-in capabilities are decoded with their argument Struct and checked field by field
(paths, commands, URLs, sizes); an MCP tool's arguments are checked where its scope names
paths (actors/tools/_mcp.py). Nothing else is judged here: running is the executors' job.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from msgspec import Struct

from actors.tools._arguments import ARGUMENTS, HttpRequest
from actors.tools._http import check_url
from actors.tools._scopes import check_request
from schemas import Capability

__all__ = ("admit_request",)


def admit_request(
    capability: str,
    arguments: dict[str, Any],
    scope: Capability,
    workspace: PurePath,
    *,
    resolve: bool,
) -> Struct | None:
    """The decoded arguments of a built-in capability (None for an MCP tool's), if the scope
    allows them.

    Raises:
        InvalidArguments: arguments that do not fit the capability.
        ScopeDenied: arguments outside the scope.
    """
    if capability not in ARGUMENTS:
        return None
    decoded = check_request(capability, arguments, scope, workspace, resolve=resolve)
    if isinstance(decoded, HttpRequest):
        check_url(scope, decoded.url)  # its addresses and redirects: the executor's, at run time
    return decoded
