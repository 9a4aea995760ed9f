"""Workspace.Upload: store a workspace file in the tenant's artifact store, named by its URI.

The runtime has checked the path against the scope before this runs; between that check and
the open an earlier command of the session could still have put a symlink, a hard link to a
file outside, a FIFO or a device there. So the file is opened without following a symlink and
without blocking (a FIFO would hang the open until a writer came), and must be a regular file
with one link. Its size is checked against the scope's `max_file_size_bytes` (or
`DEFAULT_MAX_UPLOAD_BYTES`) from the open file, and again while it is read: a file that grows
past the limit is refused, one that changes between the digest and the upload is not stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

from actors.tools._arguments import WorkspaceUpload, decode_arguments
from actors.tools._artifact_uris import ArtifactUri, label, session_key
from actors.tools._artifacts import CHUNK_BYTES, ArtifactStoreError
from actors.tools._contract import Provenance, ScopeDenied, ToolInvocation, ToolOutcome

__all__ = ("DEFAULT_MAX_UPLOAD_BYTES", "execute_workspace_upload")

DEFAULT_MAX_UPLOAD_BYTES = 64 * 1024 * 1024
"""The largest file Workspace.Upload stores when the scope sets no `max_file_size_bytes`."""


def _open_single_regular_file(path: Path, limit: int) -> tuple[int, int]:
    """An open descriptor of `path` and its size, if it is a regular single-link file within
    `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if path.is_symlink():
            raise ScopeDenied("symlink", f"{path} is a symbolic link") from None
        raise exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ScopeDenied("regular_file", f"{path} is not a regular file")
        if info.st_nlink > 1:
            raise ScopeDenied(
                "hard_link", f"{path} has {info.st_nlink} links: one may lead outside"
            )
        if info.st_size > limit:
            raise ScopeDenied(
                "max_file_size_bytes",
                f"{path} is {info.st_size} bytes, over max_file_size_bytes {limit}",
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def _digest(fd: int, path: Path, limit: int) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    while chunk := os.pread(fd, CHUNK_BYTES, size):
        size += len(chunk)
        if size > limit:
            raise ScopeDenied(
                "max_file_size_bytes", f"{path} grew past max_file_size_bytes {limit}"
            )
        digest.update(chunk)
    return digest.hexdigest(), size


async def _chunks(fd: int, size: int, chunk_bytes: int) -> AsyncIterator[bytes]:
    """The file's first `size` bytes, read a chunk at a time off the event loop (the store
    checks them against the digest)."""
    offset = 0
    while offset < size:
        chunk = await asyncio.to_thread(os.pread, fd, min(chunk_bytes, size - offset), offset)
        if not chunk:
            return
        offset += len(chunk)
        yield chunk


async def execute_workspace_upload(invocation: ToolInvocation) -> ToolOutcome:
    arguments = decode_arguments("Workspace.Upload", invocation.arguments)
    assert isinstance(arguments, WorkspaceUpload)  # noqa: S101 - decode_arguments' contract
    store = invocation.artifacts
    if store is None:
        return _failed("this tool runtime has no artifact store")
    given = Path(arguments.path)
    path = given if given.is_absolute() else invocation.workspace / given
    limit = invocation.scope.max_file_size_bytes
    if limit is None:
        limit = DEFAULT_MAX_UPLOAD_BYTES
    try:
        fd, _ = await asyncio.to_thread(_open_single_regular_file, path, limit)
    except FileNotFoundError:
        return _failed(f"{arguments.path} does not exist")
    except OSError as exc:
        return _failed(f"{arguments.path} cannot be read: {exc.strerror or exc}")
    try:
        sha256, size = await asyncio.to_thread(_digest, fd, path, limit)
        session = session_key(invocation.session_id)
        uri = ArtifactUri(store.tenant, session, sha256, size, label(path.name))
        await store.put(
            uri,
            _chunks(fd, size, store.chunk_bytes),
            step_id=invocation.step_id,
            payers=invocation.payers,
        )
    except ArtifactStoreError as exc:  # corrupt (changed while stored), over a share, full
        return _failed(str(exc))
    finally:
        os.close(fd)
    return ToolOutcome(
        status="succeeded",
        output_text=f"stored {arguments.path} ({size} bytes) as {uri}",
        details={"bytes": size, "sha256": sha256},
        provenance=Provenance(source="Workspace.Upload", locator=arguments.path, trust="workspace"),
        artifact_uris=(str(uri),),
    )


def _failed(message: str) -> ToolOutcome:
    """An upload that stored nothing (seed 002's `WORKSPACE_UPLOAD_FAILED`)."""
    return ToolOutcome(status="failed", error_code="WORKSPACE_UPLOAD_FAILED", error_message=message)
