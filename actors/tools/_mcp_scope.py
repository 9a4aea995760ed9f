"""Path scopes of an MCP tool's arguments: which arguments are paths, and whether each lies
within the scope's `allowed_paths` and outside its `blocked_paths`.

An MCP tool's arguments are whatever its server declares, so the bundle cannot name them one
by one. The scheme: a top-level argument is a path when its name is one of
`PATH_ARGUMENT_NAMES` or when the tool's input schema gives it `"format": "path"`; its value
is a string or a list of strings. The schema comes from the server and is untrusted, so it
can only add arguments to check: a path-named argument is checked whatever the schema says.

A path is resolved against the session's workspace (symlinks and `..` followed, as far as
they exist), as every relative path of a tool request is, and the server is sent that
absolute path: a relative one would be read from the server's own working directory, not
the one checked. Where the scope names paths, the resolved path is compared component by
component with each of `allowed_paths` (it must lie within one, when there are any) and
`blocked_paths` (within none), resolved the same way. A scope that names no paths checks
none: an MCP tool's reach is its server's, and only the bundle can narrow it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from actors.tools._contract import ScopeDenied
from schemas import Capability

__all__ = ("PATH_ARGUMENT_NAMES", "path_argument_names", "scoped_arguments")

PATH_ARGUMENT_NAMES: Final = frozenset({"path", "file", "filename", "directory"})


def path_argument_names(arguments: dict[str, Any], input_schema: dict[str, Any]) -> set[str]:
    """The arguments of this call that are paths under the scheme above."""
    properties = input_schema.get("properties")
    declared: set[str] = set()
    if isinstance(properties, dict):
        for name, schema in properties.items():
            if isinstance(schema, dict) and _says_path(schema):
                declared.add(str(name))
    return {name for name in arguments if name in PATH_ARGUMENT_NAMES or name in declared}


def _says_path(schema: dict[str, Any]) -> bool:
    if schema.get("format") == "path":
        return True
    items = schema.get("items")
    return isinstance(items, dict) and items.get("format") == "path"


def scoped_arguments(
    arguments: dict[str, Any],
    input_schema: dict[str, Any],
    scope: Capability,
    workspace: Path,
) -> dict[str, Any]:
    """The arguments to send, path arguments replaced by the resolved paths checked.

    Raises:
        ScopeDenied: a path argument outside `allowed_paths` or inside `blocked_paths`, or
            a path argument that is not a string (or list of strings).
    """
    names_paths = bool(scope.allowed_paths or scope.blocked_paths)
    allowed = [_resolve(workspace, root) for root in scope.allowed_paths]
    blocked = [_resolve(workspace, root) for root in scope.blocked_paths]
    sent = dict(arguments)
    for name in sorted(path_argument_names(arguments, input_schema)):
        value = arguments[name]
        if isinstance(value, str):
            sent[name] = str(_checked(name, value, workspace, allowed, blocked))
        elif isinstance(value, list) and all(isinstance(item, str) for item in value):
            sent[name] = [str(_checked(name, item, workspace, allowed, blocked)) for item in value]
        elif names_paths:
            raise ScopeDenied(
                "allowed_paths",
                f"argument {name!r} is a path argument but not a string or list of strings",
            )
    return sent


def _resolve(workspace: Path, path: str) -> Path:
    try:
        return (workspace / path).resolve()
    except (OSError, ValueError, RuntimeError) as exc:
        raise ScopeDenied("allowed_paths", f"path {path!r} cannot be resolved: {exc}") from None


def _checked(
    name: str, value: str, workspace: Path, allowed: list[Path], blocked: list[Path]
) -> Path:
    resolved = _resolve(workspace, value)
    if allowed and not any(resolved.is_relative_to(root) for root in allowed):
        raise ScopeDenied(
            "allowed_paths",
            f"argument {name!r}: {value!r} resolves to {resolved}, outside the allowed paths",
        )
    if any(resolved.is_relative_to(root) for root in blocked):
        raise ScopeDenied(
            "blocked_paths", f"argument {name!r}: {value!r} resolves to {resolved}, a blocked path"
        )
    return resolved
