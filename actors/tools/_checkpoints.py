"""Checkpoints: what each step changed in a session's workspace, and what the session changed.

Each session has a shadow git repository outside its workspace
(`<workspaces>/.checkpoints/<session>.git`, bare; a workspace's name never starts with a dot).
Before the first step that may change files the workspace is snapshotted as the base; after
each such step (`CHANGING`) it is snapshotted again, and a snapshot whose tree differs from the
last is a checkpoint: a commit whose diff against its parent is what that step changed.
`patch_preview` is the diff from the base to the last checkpoint: everything the session
changed (seed 002 §11 `GetPatchPreview`).

A snapshot is made here, not by `git add`: the workspace is walked without following symbolic
links, each regular single-link file read with `O_NOFOLLOW` and written as a blob, a symlink
recorded as its target, `.git` directories skipped (a repository inside the workspace is
recorded as its files, not as a submodule link), and anything else (FIFOs, devices, files
with several links, which may be a file outside) left out. git then only builds trees and
commits from those blobs in the shadow repository with plumbing commands, with no system or
global config and never the workspace's own: nothing a step wrote can make git run a program
(hooks, filters, fsmonitor, a diff driver).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import stat
import subprocess
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from actors.tools._workspace_owner import workspace_name

__all__ = (
    "CHANGING",
    "MAX_SNAPSHOT_FILE_BYTES",
    "Checkpoint",
    "base_snapshot",
    "has_base",
    "patch_preview",
    "shadow_repository",
    "snapshot",
    "step_diff",
    "workspace_patch",
)

CHANGING: Final = frozenset({"File.Write", "File.Delete", "Shell.Exec", "Git.Commit"})
"""Capabilities whose step may change files in the workspace: a checkpoint follows each."""

MAX_SNAPSHOT_FILE_BYTES: Final = 32 * 1024 * 1024
"""A file larger than this is left out of a snapshot (the diff says nothing of it)."""

_REF: Final = "refs/heads/checkpoints"
_GIT_ENV: Final = {
    "PATH": "/usr/bin:/bin:/usr/local/bin",
    "LANG": "C",
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_AUTHOR_NAME": "Parley",
    "GIT_AUTHOR_EMAIL": "checkpoints@parley.invalid",
    "GIT_COMMITTER_NAME": "Parley",
    "GIT_COMMITTER_EMAIL": "checkpoints@parley.invalid",
}


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A snapshot that changed the tree: its commit and the checkpoint before it (None for
    the base)."""

    commit: str
    parent: str | None


def shadow_repository(workspace: Path) -> Path:
    """Where a workspace's checkpoints are kept: beside the workspaces, never inside one."""
    return workspace.parent / ".checkpoints" / f"{workspace.name}.git"


def _git(repository: Path, *argv: str, stdin: bytes = b"", index: Path | None = None) -> str:
    env = dict(_GIT_ENV)
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    done = subprocess.run(  # noqa: S603 - a fixed git argv on our own repository
        ["git", f"--git-dir={repository}", "-c", "core.hooksPath=/dev/null", *argv],  # noqa: S607
        input=stdin,
        capture_output=True,
        env=env,
        check=False,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {argv[0]} failed: {done.stderr.decode(errors='replace')}")
    return done.stdout.decode(errors="replace")


def _write_blob(repository: Path, data: bytes) -> str:
    """Store `data` as a loose blob (as `git hash-object -w` would); return its id."""
    raw = b"blob %d\x00" % len(data) + data
    blob = hashlib.sha1(raw, usedforsecurity=False).hexdigest()
    target = repository / "objects" / blob[:2] / blob[2:]
    if not target.exists():
        target.parent.mkdir(exist_ok=True)
        staging = target.with_name(f".{blob[2:]}.{secrets.token_hex(6)}.tmp")
        staging.write_bytes(zlib.compress(raw, 1))
        os.replace(staging, target)
    return blob


def _read_file(path: Path) -> tuple[bytes, int] | None:
    """A regular single-link file's bytes and mode, never following a symlink; None for
    anything else or anything too large."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            return None
        if info.st_size > MAX_SNAPSHOT_FILE_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_SNAPSHOT_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_SNAPSHOT_FILE_BYTES:
        return None
    return data, 0o100755 if info.st_mode & 0o111 else 0o100644


def _entries(repository: Path, workspace: Path) -> bytes:
    """`git update-index -z --index-info` records of every file the snapshot keeps."""
    records = []
    for top, dirs, files in os.walk(workspace, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d != ".git" and not Path(top, d).is_symlink())
        symlinked = [d for d in os.listdir(top) if Path(top, d).is_symlink()]
        for name in sorted({*files, *symlinked}):
            path = Path(top, name)
            relative = path.relative_to(workspace).as_posix().encode()
            if path.is_symlink():
                blob, mode = _write_blob(repository, os.fsencode(os.readlink(path))), 0o120000
            else:
                found = _read_file(path)
                if found is None:
                    continue
                blob, mode = _write_blob(repository, found[0]), found[1]
            records.append(b"%o %s\t%s\x00" % (mode, blob.encode(), relative))
    return b"".join(records)


def snapshot(workspace: Path, step: str) -> Checkpoint | None:
    """Snapshot the workspace; the checkpoint it made, or None when nothing changed since the
    last one. The first snapshot of a session is its base (a checkpoint without parent).
    Snapshots of one session are taken one at a time (a lock file beside its repository,
    which runtimes sharing the workspaces directory share too). Blocking: run it in a
    thread."""
    repository = shadow_repository(workspace)
    with _one_at_a_time(repository):
        return _snapshot(repository, workspace, step)


def has_base(workspace: Path) -> bool:
    """Whether the session's base snapshot is certainly made: its checkpoint ref is written.
    A cheap look for the common case; False may still mean it has one (a packed ref), which
    `base_snapshot` settles under the lock."""
    return (shadow_repository(workspace) / _REF).is_file()


def base_snapshot(workspace: Path) -> None:
    """Take the session's base snapshot unless it has one, deciding under the snapshot lock.

    Why not "unless its repository exists": the repository is created inside the first
    snapshot, before that snapshot's commit, so a step that saw it then would change files
    the base then records as already there, and they would be missing from every diff.
    Blocking: run it in a thread."""
    repository = shadow_repository(workspace)
    with _one_at_a_time(repository):
        if (repository / "HEAD").exists() and _last(repository) is not None:
            return
        _snapshot(repository, workspace, "base")


@contextmanager
def _one_at_a_time(repository: Path) -> Iterator[None]:
    repository.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with (repository.parent / f"{repository.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _snapshot(repository: Path, workspace: Path, step: str) -> Checkpoint | None:
    if not (repository / "HEAD").exists():
        subprocess.run(  # noqa: S603 - a fixed argv
            ["git", "init", "--quiet", "--bare", str(repository)],  # noqa: S607
            env=_GIT_ENV,
            check=True,
            capture_output=True,
        )
    index = repository / "parley-index"
    index.unlink(missing_ok=True)
    entries = _entries(repository, workspace)
    _git(repository, "update-index", "-z", "--add", "--index-info", stdin=entries, index=index)
    tree = _git(repository, "write-tree", index=index).strip()
    parent = _last(repository)
    if parent is not None and _git(repository, "rev-parse", f"{parent}^{{tree}}").strip() == tree:
        return None
    parents = ("-p", parent) if parent else ()
    commit = _git(repository, "commit-tree", tree, *parents, "-m", step).strip()
    _git(repository, "update-ref", _REF, commit, *((parent,) if parent else ()))
    return Checkpoint(commit, parent)


def _last(repository: Path) -> str | None:
    try:
        return _git(repository, "rev-parse", "--verify", "--quiet", _REF).strip() or None
    except RuntimeError:
        return None


def _diff(repository: Path, old: str, new: str) -> str:
    return _git(
        repository, "diff-tree", "-p", "--no-ext-diff", "--no-textconv", "--full-index", old, new
    )


def step_diff(workspace: Path, checkpoint: Checkpoint) -> str:
    """What the step that made `checkpoint` changed, as a unified diff ("" for the base)."""
    if checkpoint.parent is None:
        return ""
    return _diff(shadow_repository(workspace), checkpoint.parent, checkpoint.commit)


def patch_preview(workspaces: Path, session_id: str) -> str:
    """Everything session `session_id` changed in its workspace under `workspaces` (the tool
    runtime's `workspaces` option), as a unified diff: seed 002 §11 `GetPatchPreview`.
    Blocking."""
    return workspace_patch(workspaces / workspace_name(session_id))


def workspace_patch(workspace: Path) -> str:
    """Everything changed in `workspace`, from its base snapshot to its last checkpoint, as a
    unified diff ("" when nothing changed or no step ran). Blocking."""
    repository = shadow_repository(workspace)
    last = _last(repository) if (repository / "HEAD").exists() else None
    if last is None:
        return ""
    base = _git(repository, "rev-list", "--max-parents=0", last).split()[0]
    return "" if base == last else _diff(repository, base, last)
