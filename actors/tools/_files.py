"""File.Read, File.Write and File.Delete: the runtime's file executors.

The runtime has checked the request's path against its scope on the real file system before
an executor runs (actors/tools/_admission.py: symlinks resolved, hard links refused). Between
that check and the open, an earlier command of the session could still swap the last
component for a symlink, so every open here refuses to follow one (`O_NOFOLLOW`) and a file
read or replaced must still be a regular file with a single link. A write replaces the file
through a temporary sibling and a rename, so a reader never sees half a file and a write cut
short by a crash leaves the old content.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from actors.tools._arguments import FileDelete, FileRead, FileWrite, decode_arguments
from actors.tools._contract import Provenance, ScopeDenied, ToolInvocation, ToolOutcome
from actors.tools._paths import check_path

__all__ = (
    "DEFAULT_MAX_READ_BYTES",
    "execute_file_delete",
    "execute_file_read",
    "execute_file_write",
)

DEFAULT_MAX_READ_BYTES = 256 * 1024
"""What File.Read returns at most when the scope sets no `max_output_bytes`."""


def _target(invocation: ToolInvocation, path: str, *, write: bool = False) -> Path:
    """The real path the executor acts on: checked against the scope again at this moment,
    with every symlink resolved (the runtime checked it before; a command of the session may
    have changed the tree since), then opened without following a last symlink."""
    return check_path(invocation.scope, path, invocation.workspace, resolve=True, write=write)


def _locator(invocation: ToolInvocation, path: Path) -> str:
    """How a path is named to the model: relative to the workspace when inside it, so the
    runtime's own directories are not told to every model."""
    try:
        return str(path.relative_to(invocation.workspace))
    except ValueError:
        return str(path)


def _single_regular_file(fd: int, path: Path) -> os.stat_result:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise ScopeDenied("regular_file", f"{path} is not a regular file")
    if info.st_nlink > 1:
        raise ScopeDenied("hard_link", f"{path} has {info.st_nlink} links: one may lead outside")
    return info


def _read(path: Path, limit: int) -> tuple[bytes, int]:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = _single_regular_file(fd, path)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(limit), info.st_size
    finally:
        os.close(fd)


async def execute_file_read(invocation: ToolInvocation) -> ToolOutcome:
    arguments = decode_arguments("File.Read", invocation.arguments)
    assert isinstance(arguments, FileRead)  # noqa: S101 - decode_arguments' contract
    path = _target(invocation, arguments.path)
    scope = invocation.scope
    limit = scope.max_output_bytes or DEFAULT_MAX_READ_BYTES
    if arguments.max_bytes is not None:
        limit = min(limit, arguments.max_bytes)
    if scope.max_file_size_bytes is not None and path.exists():
        size = path.stat().st_size
        if size > scope.max_file_size_bytes:
            raise ScopeDenied(
                "max_file_size_bytes",
                f"{path} is {size} bytes, over max_file_size_bytes {scope.max_file_size_bytes}",
            )
    try:
        data, size = await asyncio.to_thread(_read, path, limit)
    except FileNotFoundError:
        return _failed(f"{path} does not exist")
    except OSError as exc:
        return _failed(f"{path} cannot be read: {exc.strerror or exc}")
    return ToolOutcome(
        status="succeeded",
        output_text=data.decode("utf-8", errors="replace"),
        truncated=size > len(data),
        details={"bytes": size},
        provenance=Provenance(
            source="File.Read", locator=_locator(invocation, path), trust="untrusted"
        ),
    )


def _write(path: Path, content: bytes, append: bool) -> int:
    if append and path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            _single_regular_file(fd, path)
            os.write(fd, content)
            os.fsync(fd)
            return os.fstat(fd).st_size
        finally:
            os.close(fd)
    if path.is_symlink():
        raise ScopeDenied("symlink", f"{path} is a symbolic link")
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.parley-write")
    fd = os.open(
        staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
    )
    try:
        os.write(fd, content)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(staging, path)
    return len(content)


async def execute_file_write(invocation: ToolInvocation) -> ToolOutcome:
    arguments = decode_arguments("File.Write", invocation.arguments)
    assert isinstance(arguments, FileWrite)  # noqa: S101 - decode_arguments' contract
    path = _target(invocation, arguments.path, write=True)
    content = arguments.content.encode()
    limit = invocation.scope.max_file_size_bytes
    existing = path.stat().st_size if arguments.append and path.exists() else 0
    if limit is not None and existing + len(content) > limit:
        raise ScopeDenied(
            "max_file_size_bytes",
            f"writing {path} would make it {existing + len(content)} bytes, over "
            f"max_file_size_bytes {limit}",
        )
    try:
        size = await asyncio.to_thread(_write, path, content, arguments.append)
    except OSError as exc:
        return _failed(f"{path} cannot be written: {exc.strerror or exc}")
    return ToolOutcome(
        status="succeeded",
        output_text=f"wrote {len(content)} bytes to {arguments.path}",
        details={"bytes": size},
        provenance=Provenance(
            source="File.Write", locator=_locator(invocation, path), trust="workspace"
        ),
    )


async def execute_file_delete(invocation: ToolInvocation) -> ToolOutcome:
    arguments = decode_arguments("File.Delete", invocation.arguments)
    assert isinstance(arguments, FileDelete)  # noqa: S101 - decode_arguments' contract
    checked = _target(invocation, arguments.path, write=True)
    # A symlink is deleted itself, never the file it names: act on the named entry in its
    # real directory (which the check above resolved inside the scope with it).
    named = invocation.workspace / arguments.path
    path = await asyncio.to_thread(_entry_itself, named, checked)
    try:
        if path.is_dir() and not path.is_symlink():
            return _failed(f"{path} is a directory: File.Delete removes files")
        await asyncio.to_thread(path.unlink)
    except FileNotFoundError:
        return _failed(f"{path} does not exist")
    except OSError as exc:
        return _failed(f"{path} cannot be deleted: {exc.strerror or exc}")
    return ToolOutcome(
        status="succeeded",
        output_text=f"deleted {arguments.path}",
        provenance=Provenance(
            source="File.Delete", locator=_locator(invocation, path), trust="workspace"
        ),
    )


def _entry_itself(named: Path, checked: Path) -> Path:
    """The entry to delete: a symlink in its real directory, else the checked real path."""
    if named.is_symlink():
        return Path(os.path.realpath(named.parent)) / named.name
    return checked


def _failed(message: str) -> ToolOutcome:
    return ToolOutcome(status="failed", error_code="TOOL_EXECUTION_FAILED", error_message=message)
