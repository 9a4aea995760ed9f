"""A sandbox user leased with its workspace, for the runs in it (actors/tools/_confinement.py
says why a root runtime runs commands and git as a user of their own).

The workspace is handed to the leased uid when the first run in it starts and taken back when
the last one ends: each is a walk of the whole workspace (`lchown` of every entry), run in a
worker thread so a large workspace never stalls the event loop where other sessions' steps go
on. A workspace's hand-over and take-back are serialized by a lock of its own, and each runs
to its end even when its run is cancelled meanwhile, so no run starts in a workspace half
handed over or half taken back.
"""

from __future__ import annotations

import asyncio
import os
import random
import stat
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from actors.tools._confinement import SANDBOX_UIDS, processes_of, sweep_user
from actors.tools._uninterrupted import uninterrupted

__all__ = ("SandboxUser", "lease_sandbox_user")

_leases: dict[Path, tuple[int, int]] = {}
"""Workspace -> (leased uid, runs using it) in this process."""
_transitions: dict[Path, tuple[asyncio.Lock, int]] = {}
"""Workspace -> the lock its hand-over and take-back hold, and how many leases want it
(dropped at none, so the table does not grow with every workspace ever used)."""


@dataclass(frozen=True, slots=True)
class SandboxUser:
    """The uid a run's processes have, leased with its workspace."""

    uid: int
    workspace: Path

    def alone(self) -> bool:
        """Whether no other run uses the uid now: only then may one run's end kill every
        process of the uid (a run beside it in the workspace would lose its own)."""
        return _leases.get(self.workspace, (0, 0))[1] == 1


@asynccontextmanager
async def lease_sandbox_user(workspace: Path) -> AsyncIterator[SandboxUser]:
    """A sandbox user for a run in `workspace`, with the workspace handed to it meanwhile.

    Runs in the same workspace at once share the uid (each must be able to write there);
    when the last one ends, every process of the uid is killed and the workspace is the
    runtime's again.
    """
    lock = _want(workspace)
    try:
        user, cancelled = await uninterrupted(_acquire(workspace, lock))
        if cancelled:  # handed over whole while cancelled: taken back whole, never used
            await uninterrupted(_release(workspace, lock))
            raise asyncio.CancelledError
        try:
            yield user
        finally:
            _, cancelled = await uninterrupted(_release(workspace, lock))
            if cancelled:
                raise asyncio.CancelledError
    finally:
        _unwant(workspace)


def _want(workspace: Path) -> asyncio.Lock:
    lock, wanting = _transitions.get(workspace, (asyncio.Lock(), 0))
    _transitions[workspace] = (lock, wanting + 1)
    return lock


def _unwant(workspace: Path) -> None:
    lock, wanting = _transitions[workspace]
    if wanting > 1:
        _transitions[workspace] = (lock, wanting - 1)
    else:
        del _transitions[workspace]


async def _acquire(workspace: Path, lock: asyncio.Lock) -> SandboxUser:
    async with lock:
        uid, users = _leases.get(workspace, (0, 0))
        if users == 0:
            uid = _free_uid()
            _leases[workspace] = (uid, 0)  # taken: no other workspace is given it meanwhile
            try:
                await asyncio.to_thread(_hand_over, workspace, uid)
            except BaseException:
                await asyncio.to_thread(_take_back, workspace, uid)
                del _leases[workspace]
                raise
        _leases[workspace] = (uid, users + 1)
        return SandboxUser(uid, workspace)


async def _release(workspace: Path, lock: asyncio.Lock) -> None:
    async with lock:
        uid, users = _leases.pop(workspace)
        if users > 1:
            _leases[workspace] = (uid, users - 1)
            return
        sweep_user(uid)
        await asyncio.to_thread(_take_back, workspace, uid)


def _free_uid() -> int:
    taken = {uid for uid, _ in _leases.values()}
    while True:
        uid = random.choice(SANDBOX_UIDS)  # noqa: S311 - uniqueness, not secrecy, is needed
        if uid not in taken and not processes_of(uid):
            return uid


def _hand_over(workspace: Path, uid: int) -> None:
    """Give the runtime's entries of the workspace to `uid`, without following links.

    A file with several hard links is left as it is: it may be a link the command made to a
    file outside the workspace, which must never become the sandbox user's.
    """
    runtime = os.getuid()
    for entry in _entries(workspace):
        if entry.st_uid == runtime and (stat.S_ISDIR(entry.st_mode) or entry.st_nlink == 1):
            os.lchown(entry.path, uid, uid)


def _take_back(workspace: Path, uid: int) -> None:
    """Give every entry the sandbox user owns in the workspace back to the runtime."""
    for entry in _entries(workspace):
        if entry.st_uid == uid:
            os.lchown(entry.path, os.getuid(), os.getgid())


@dataclass(frozen=True, slots=True)
class _Entry:
    path: str
    st_uid: int
    st_mode: int
    st_nlink: int


def _entries(root: Path) -> Iterator[_Entry]:
    """The workspace and everything under it, symbolic links as themselves (never followed)."""
    top = os.lstat(root)
    yield _Entry(str(root), top.st_uid, top.st_mode, top.st_nlink)
    for directory, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            path = os.path.join(directory, name)
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue
            yield _Entry(path, info.st_uid, info.st_mode, info.st_nlink)
