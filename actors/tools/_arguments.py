"""The arguments of each built-in capability, as a tool request carries them.

One Struct per capability: the gate and the runtime decode a request's `arguments` with it
(unknown fields refused, so a field an old runtime cannot read is never ignored), and a
brain is offered its JSON Schema (`arguments_schema`). Paths are relative to the session's
workspace unless absolute; a command is an argv, never a shell string.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

import msgspec
from msgspec import Meta, Struct

__all__ = (
    "ARGUMENTS",
    "FileDelete",
    "FileRead",
    "FileWrite",
    "GitCommit",
    "GitDiff",
    "GitPush",
    "GitStatus",
    "HttpRequest",
    "InvalidArguments",
    "ShellExec",
    "WorkspaceUpload",
    "arguments_schema",
    "decode_arguments",
)

Text = Annotated[str, Meta(min_length=1, max_length=4096)]


class FileRead(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Read a file's text; at most `max_bytes` of it (and never over the scope's limit)."""

    path: Text
    max_bytes: Annotated[int, Meta(ge=1)] | None = None


class FileWrite(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Create or replace a file with `content` (appended with `append`)."""

    path: Text
    content: str
    append: bool = False


class FileDelete(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    path: Text


class ShellExec(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Run one program: `argv[0]` is the program, never a shell line to interpret."""

    argv: Annotated[tuple[Text, ...], Meta(min_length=1, max_length=256)]
    cwd: Text = "."
    stdin: str = ""
    timeout_s: Annotated[float, Meta(gt=0, le=3600)] | None = None


class HttpRequest(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    url: Text
    method: Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"] = "GET"
    headers: dict[str, str] = {}
    body: str = ""


class GitStatus(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    repo: Text = "."


class GitDiff(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    repo: Text = "."
    staged: bool = False


class GitCommit(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Commit `paths` (every change when empty) with `message`."""

    repo: Text = "."
    message: Text
    paths: tuple[Text, ...] = ()


class GitPush(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Push `branch` to `remote` (a remote's name in the repository, checked by its URL)."""

    repo: Text = "."
    remote: Text = "origin"
    branch: Text


class WorkspaceUpload(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Store a workspace file as an artifact of the session."""

    path: Text


ARGUMENTS: Final[dict[str, type[Struct]]] = {
    "File.Read": FileRead,
    "File.Write": FileWrite,
    "File.Delete": FileDelete,
    "Shell.Exec": ShellExec,
    "Network.Http": HttpRequest,
    "Git.Status": GitStatus,
    "Git.Diff": GitDiff,
    "Git.Commit": GitCommit,
    "Git.Push": GitPush,
    "Workspace.Upload": WorkspaceUpload,
}


class InvalidArguments(ValueError):
    """A request's arguments do not fit its capability (or it names no built-in one)."""


def decode_arguments(capability: str, arguments: dict[str, Any]) -> Struct:
    """The request's arguments as its capability's Struct.

    Raises:
        InvalidArguments: an unknown capability, an unknown field, a missing or mistyped one.
    """
    kind = ARGUMENTS.get(capability)
    if kind is None:
        raise InvalidArguments(f"{capability!r} is not a built-in capability")
    try:
        return msgspec.convert(arguments, kind)
    except msgspec.ValidationError as exc:
        raise InvalidArguments(f"{capability} arguments: {exc}") from None


def arguments_schema(capability: str) -> dict[str, Any]:
    """The JSON Schema a brain is shown for a built-in capability's arguments."""
    schema: dict[str, Any] = msgspec.json.schema(ARGUMENTS[capability])
    return schema
