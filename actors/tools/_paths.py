"""Whether a scope allows a path: lexically at the gate, on the real file system in the runtime.

A scope's `allowed_paths` and `blocked_paths` are prefixes matched by whole path components
(allowed `/a/b` allows `/a/b` and `/a/b/c`, never `/a/bc`). Relative request paths and relative
entries are relative to the session's workspace. An empty `allowed_paths` allows nothing, and
a blocked prefix wins over an allowed one.

The check runs twice, because the two callers see different worlds:

- The gate checks before delivery, with no access to the runtime's files: `resolve=False`
  applies `.` and `..` lexically, against a workspace that may be virtual
  (`PurePosixPath("/workspace")`), and never touches the disk.
- The tool runtime checks again before executing, trusting no earlier check: `resolve=True`
  also resolves every symlink (of the path, or of its nearest existing parent for a file to be
  created) and matches the real path, so a symlink an earlier step made cannot lead out; and
  it refuses a file with more than one hard link, since a hard link made by an earlier step
  can name a file outside the scope that no path resolution can tell apart.

Only the workspace itself is resolved on the allowed side. An allowed entry is never resolved:
an agent that may write inside the workspace could otherwise replace an allowed directory
with a symlink to `/` and widen its own scope. A blocked entry is matched both as written and
resolved, since resolving it can only block more.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePath, PurePosixPath
from typing import Final, TypeVar

from actors.tools._contract import ScopeDenied
from schemas import Capability

__all__ = ("Parts", "check_path", "lexical_path", "names_another_system", "normal_parts", "within")

PathT = TypeVar("PathT", bound=PurePath)
Parts = tuple[str, ...]
"""An absolute, normalised path as its components below the root: matching compares these
(strings, not pathlib objects, since the gate checks every tool request)."""

_OTHER_SYSTEM: Final = re.compile(r"^([A-Za-z]:|\\\\)")
"""A drive (`C:`) or a UNC share (`\\\\server`): another operating system's path."""


def normal_parts(base: str, path: str) -> Parts:
    """`path` joined to the absolute `base` (unless absolute itself), `.` and `..` applied.

    `..` above the root stays at the root, as the kernel does. This is what the gate can know
    without the disk; the runtime's real answer (`os.path.realpath`) may differ when a
    component is a symlink, which is why it checks both.
    """
    parts: list[str] = []
    for part in posixpath.join(base, path).split("/"):
        if part == "..":
            if parts:
                parts.pop()
        elif part and part != ".":
            parts.append(part)
    return tuple(parts)


def lexical_path(base: PathT, path: str) -> PathT:
    """`normal_parts` as a path of `base`'s type."""
    return type(base)(_shown(normal_parts(str(base), path)))


def within(path: Parts, prefix: Parts) -> bool:
    """`path` is `prefix` or beneath it, by whole components."""
    return path[: len(prefix)] == prefix


def names_another_system(entry: str) -> bool:
    """An entry with a drive or UNC share (`C:\\Users\\...`, as seed 002's example bundle
    shows beside the POSIX one) names another operating system's paths: on POSIX it could
    only ever be a strange file name in the workspace, so it is left out."""
    return bool(_OTHER_SYSTEM.match(entry))


def _shown(parts: Parts) -> str:
    return "/" + "/".join(parts)


def _entries(entries: Iterable[str], base: str) -> list[Parts]:
    """A scope's path entries as normalised absolute paths under `base` (but another
    system's, and any holding a NUL byte, which no file's name can)."""
    return [
        normal_parts(base, entry)
        for entry in entries
        if "\x00" not in entry and not names_another_system(entry)
    ]


def _match(
    path: Parts, shown: str, allowed: Sequence[Parts], blocked: Iterable[Parts], write: bool
) -> None:
    """Refuse `path` unless an allowed prefix holds it and no blocked prefix does.

    A write (or delete) of a directory changes all beneath it, so with `write` a path that
    holds a blocked path is refused too.
    """
    for prefix in blocked:
        if within(path, prefix):
            raise ScopeDenied("blocked_paths", f"path {shown} is blocked by {_shown(prefix)}")
        if write and within(prefix, path):
            raise ScopeDenied(
                "blocked_paths",
                f"path {shown} holds the blocked path {_shown(prefix)}: not writable",
            )
    if not any(within(path, prefix) for prefix in allowed):
        why = "allowed_paths is empty (allows nothing)" if not allowed else "outside allowed_paths"
        raise ScopeDenied("allowed_paths", f"path {shown}: {why}")


def check_path(
    scope: Capability, path: str, workspace: PathT, *, resolve: bool, write: bool = False
) -> PathT:
    """The absolute path `path` names, if `scope` allows it.

    Args:
        scope: the capability's effective scope.
        path: the path as the request names it (relative to the workspace unless absolute).
        workspace: the session's workspace, absolute. The gate may pass a virtual one
            (`PurePosixPath("/workspace")`); with `resolve` it must be the real `Path`.
        resolve: resolve symlinks and refuse hard-linked files on the real file system (the
            runtime); without it the check is lexical and never touches the disk (the gate).
        write: the request creates, changes or deletes the path: a path that holds a
            blocked path is refused as well.

    Returns:
        The checked path, of the workspace's type: lexical without `resolve`, the real path
        (every symlink resolved) with it, which is the one an executor should act on.

    Raises:
        ScopeDenied: with `rule` `allowed_paths` or `blocked_paths`, and a message naming the
            path and the reason.
        TypeError: a relative or non-POSIX workspace, or `resolve` without a real `Path`.
    """
    if not isinstance(workspace, PurePosixPath) or not workspace.is_absolute():
        raise TypeError(f"the workspace must be an absolute POSIX path, not {workspace!r}")
    if "\x00" in path:
        raise ScopeDenied("allowed_paths", f"path {path!r} holds a NUL byte")
    base = str(workspace)
    lexical = normal_parts(base, path)
    shown = repr(path) if _shown(lexical) == path else f"{path!r} ({_shown(lexical)})"
    blocked = _entries(scope.blocked_paths, base)
    _match(lexical, shown, _entries(scope.allowed_paths, base), blocked, write)
    if not resolve:
        return type(workspace)(_shown(lexical))
    if not isinstance(workspace, Path):
        raise TypeError("resolve=True needs the real workspace as a pathlib.Path")
    return type(workspace)(_check_real(scope, path, base, blocked, write))


def _check_real(
    scope: Capability, path: str, workspace: str, blocked: list[Parts], write: bool
) -> str:
    """The runtime's second look: the real path, matched, and not a hard-linked file."""
    # realpath (not strict) resolves every existing component, symlinks and then `..`, as the
    # kernel will; the components that do not exist yet (a file to create) follow literally.
    real = os.path.realpath(posixpath.join(workspace, path))
    if os.path.islink(real):  # still a link after resolution: a loop, or one too deep
        raise ScopeDenied("allowed_paths", f"path {path!r} is a symlink loop")
    real_workspace = os.path.realpath(workspace)
    real_blocked = {
        *blocked,
        *_entries(scope.blocked_paths, real_workspace),
        *(normal_parts("/", os.path.realpath(_shown(prefix))) for prefix in blocked),
    }
    allowed = _entries(scope.allowed_paths, real_workspace)
    shown = f"{path!r} (resolves to {real})"
    _match(normal_parts("/", real), shown, allowed, real_blocked, write)
    _refuse_hard_links(real, path)
    return real


def _refuse_hard_links(real: str, path: str) -> None:
    """Refuse a file that has another name: it may be a hard link to a file out of scope.

    A hard link is the same file under a second name; nothing about the name in scope says
    where the other one lives, so any file with more than one link is refused, for reading
    and for writing. A directory's link count counts its subdirectories, so directories are
    left to their contents' checks.
    """
    try:
        status = os.lstat(real)
    except FileNotFoundError:
        return  # a file still to be created has no other name
    except OSError as exc:
        raise ScopeDenied("allowed_paths", f"path {path!r} cannot be checked: {exc}") from None
    if not stat.S_ISDIR(status.st_mode) and status.st_nlink > 1:
        raise ScopeDenied(
            "allowed_paths",
            f"path {path!r} is a file with {status.st_nlink} hard links: another of its "
            "names may be outside allowed_paths",
        )
