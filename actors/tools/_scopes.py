"""A tool request checked against its capability's scope (seed 002 §9), by the gate and again by
the tool runtime.

`check_request` is the one entry point both use: it decodes the arguments with the
capability's Struct and applies the checks that capability needs, the paths (`_paths.py`), the
command (`_commands.py`) and the size limit. The gate calls it with `resolve=False` and a
virtual workspace, before delivery; the runtime calls it with `resolve=True` and the real
workspace, before executing, trusting no earlier check. `narrow_scope` gives the scope of a
delegated or sub-agent call, which can only be narrower than its caller's.
"""

from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path, PurePath, PurePosixPath
from typing import Any, TypeVar

from msgspec import Struct

from actors.tools._arguments import (
    FileDelete,
    FileRead,
    FileWrite,
    GitCommit,
    GitDiff,
    GitPush,
    GitStatus,
    HttpRequest,
    ShellExec,
    WorkspaceUpload,
    decode_arguments,
)
from actors.tools._commands import check_command
from actors.tools._contract import ScopeDenied
from actors.tools._paths import check_path, names_another_system, normal_parts, within
from schemas import Capability

__all__ = ("check_request", "check_size", "narrow_scope")

PathT = TypeVar("PathT", bound=PurePath)


def check_size(scope: Capability, size: int) -> None:
    """Refuse `size` bytes when the scope's `max_file_size_bytes` is smaller.

    Raises:
        ScopeDenied: rule `max_file_size_bytes`.
        ValueError: a negative size.
    """
    if size < 0:
        raise ValueError(f"a size is never negative: {size}")
    limit = scope.max_file_size_bytes
    if limit is not None and size > limit:
        raise ScopeDenied(
            "max_file_size_bytes", f"{size} bytes is over max_file_size_bytes ({limit})"
        )


def check_request(
    capability: str,
    arguments: dict[str, Any],
    scope: Capability,
    workspace: PathT,
    *,
    resolve: bool,
) -> Struct:
    """The request's decoded arguments, if `scope` allows every path and command in them.

    Args:
        capability: a built-in capability's name (`File.Read`, ...).
        arguments: the request's `arguments`, as decoded from JSON.
        scope: the capability's effective scope for the calling profile.
        workspace: the session's workspace (a virtual `PurePosixPath` at the gate, the real
            `Path` in the runtime).
        resolve: check on the real file system (the runtime) or lexically (the gate).

    Returns:
        The arguments as the capability's Struct, unchanged: an executor calls `check_path`
        itself for the resolved path it acts on.

    Raises:
        InvalidArguments: the arguments do not fit the capability (raised as is).
        ScopeDenied: what the scope refuses, with the rule that refused it.
    """
    decoded = decode_arguments(capability, arguments)
    match decoded:
        case FileRead():
            check_path(scope, decoded.path, workspace, resolve=resolve)
        case FileWrite():
            target = check_path(scope, decoded.path, workspace, resolve=resolve, write=True)
            size = len(decoded.content.encode())
            if decoded.append and resolve:
                size += _regular_file_size(target)
            check_size(scope, size)
        case FileDelete():
            check_path(scope, decoded.path, workspace, resolve=resolve, write=True)
        case ShellExec():
            check_command(scope, decoded.argv)
            check_path(scope, decoded.cwd, workspace, resolve=resolve)
        case GitStatus() | GitDiff() | GitPush() | GitCommit():
            # A git command reads or changes the whole work tree (a diff shows every changed
            # file, a commit with no paths takes them all), so the repository is checked as a
            # write: one that holds a blocked path is refused.
            check_path(scope, decoded.repo, workspace, resolve=resolve, write=True)
            if isinstance(decoded, GitCommit):
                for path in decoded.paths:
                    joined = posixpath.join(decoded.repo, path)
                    check_path(scope, joined, workspace, resolve=resolve, write=True)
        case WorkspaceUpload():
            target = check_path(scope, decoded.path, workspace, resolve=resolve)
            if resolve:
                check_size(scope, _regular_file_size(target))
        case HttpRequest():
            pass  # the HTTP executor checks the resolved address and every redirect
    return decoded


def _regular_file_size(path: PurePath) -> int:
    """The size of the regular file at `path` (already resolved), 0 if there is none yet."""
    try:
        status = os.stat(Path(path))
    except FileNotFoundError:
        return 0
    return status.st_size if stat.S_ISREG(status.st_mode) else 0


def narrow_scope(outer: Capability, inner: Capability) -> Capability:
    """The scope of a call made along a delegation or sub-agent chain: never wider than either.

    `outer` is the caller's scope of the capability, `inner` the callee's own. Lists that
    allow intersect, lists that block unite, limits take the smaller, approval is needed if
    either needs it. Edge cases, each resolved towards refusing:

    - Paths intersect as paths: `/a` and `/a/b` give `/a/b`; `/a` and `/b` give nothing.
      A relative entry and an absolute one cannot be compared without a workspace and give
      nothing (name them alike on both sides); a relative entry stays relative to the
      workspace the narrowed scope is checked against. `.` and `..` are applied first; a
      relative entry reaching above the workspace (`../x`) is within only an entry reaching
      exactly as far up (`..`). An entry with a drive (`C:\\...`) allows nothing on POSIX
      and is dropped from the allowed side.
    - Commands intersect as exact strings, as they are matched: `git` and `/usr/bin/git` give
      nothing. Domains intersect as exact names, ignoring case: a domain one side allows by
      a pattern and the other by name is lost (name it on both sides).
    - An empty allowed list on either side allows nothing, so the result allows nothing.
    - `None` limits mean no limit: the other side's limit is kept.
    - `approval_rule_id` is the outer one's when it needs approval, else the inner one's.

    Raises:
        ValueError: the two scopes are of different capabilities.
    """
    if not _same_capability(outer.name, inner.name):
        raise ValueError(f"cannot narrow {outer.name!r} by {inner.name!r}")
    approvers = [s for s in (outer, inner) if s.requires_approval and s.approval_rule_id]
    return Capability(
        name=inner.name,
        allowed_paths=_paths_within_both(outer.allowed_paths, inner.allowed_paths),
        blocked_paths=_unique((*outer.blocked_paths, *inner.blocked_paths)),
        allowed_commands=tuple(
            c for c in _unique(inner.allowed_commands) if c in outer.allowed_commands
        ),
        blocked_commands=_unique((*outer.blocked_commands, *inner.blocked_commands)),
        allowed_domains=_domains_in_both(outer.allowed_domains, inner.allowed_domains),
        max_file_size_bytes=_smaller(outer.max_file_size_bytes, inner.max_file_size_bytes),
        max_output_bytes=_smaller(outer.max_output_bytes, inner.max_output_bytes),
        requires_approval=outer.requires_approval or inner.requires_approval,
        approval_rule_id=(
            approvers[0].approval_rule_id
            if approvers
            else outer.approval_rule_id or inner.approval_rule_id
        ),
    )


def _same_capability(outer: str, inner: str) -> bool:
    """The same name, or an MCP server's wildcard (`Mcp.s.*`) and one of its tools."""
    if outer == inner:
        return True
    for wildcard, name in ((outer, inner), (inner, outer)):
        if wildcard.endswith(".*") and name.startswith(wildcard[:-1]):
            return True
    return False


def _unique(items: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _smaller(first: int | None, second: int | None) -> int | None:
    limits = [limit for limit in (first, second) if limit is not None]
    return min(limits) if limits else None


def _domains_in_both(outer: tuple[str, ...], inner: tuple[str, ...]) -> tuple[str, ...]:
    outer_names = {domain.lower() for domain in outer}
    return _unique(tuple(domain for domain in inner if domain.lower() in outer_names))


def _relative_parts(entry: str) -> tuple[str, ...]:
    """A relative entry's components with `.` and `..` applied; `..` left only in front."""
    parts: list[str] = []
    for part in PurePosixPath(entry).parts:
        if part == ".." and parts and parts[-1] != "..":
            parts.pop()
        else:
            parts.append(part)
    return tuple(parts)


def _relative_within(path: tuple[str, ...], prefix: tuple[str, ...]) -> bool:
    """Within by components, reaching exactly as far above the workspace (`..`) as `prefix`."""
    return path[: len(prefix)] == prefix and path.count("..") == prefix.count("..")


def _paths_within_both(outer: tuple[str, ...], inner: tuple[str, ...]) -> tuple[str, ...]:
    """Entries allowing exactly the paths some entry of each side allows (the deeper of each
    nested pair)."""
    kept: list[str] = []
    for first in outer:
        for second in inner:
            if names_another_system(first) or names_another_system(second):
                continue
            absolute = (first.startswith("/"), second.startswith("/"))
            if absolute == (True, True):
                a, b = normal_parts("/", first), normal_parts("/", second)
                if within(a, b) or within(b, a):
                    kept.append("/" + "/".join(a if within(a, b) else b))
            elif absolute == (False, False):
                x, y = _relative_parts(first), _relative_parts(second)
                if _relative_within(x, y) or _relative_within(y, x):
                    deeper = x if _relative_within(x, y) else y
                    kept.append("/".join(deeper) or ".")
    return _unique(tuple(kept))
