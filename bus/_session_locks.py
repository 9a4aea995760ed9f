"""One piece of a session's work at a time in this process, in the order they arrived.

The router's handlers run concurrently (a turn waits on KV round trips, and one session must
not hold up the others); this keeps one session's inputs in order, and its effects reach the
timeline in the order its transitions were stored. Across replicas, compare-and-set does.
The tool runtime's steps run concurrently too (one agent's long command must not hold up every
other person's steps), and this keeps one session's steps one after another in its workspace,
whose checkpoints are commits in one repository.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ("SessionLocks",)


class SessionLocks:
    """A lock per session id, dropped once nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(session_id, (asyncio.Lock(), 0))
        self._locks[session_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[session_id]
            if users == 1:
                del self._locks[session_id]
            else:
                self._locks[session_id] = (lock, users - 1)
