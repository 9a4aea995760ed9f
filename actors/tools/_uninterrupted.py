"""Work that must run to its end even when its caller is cancelled meanwhile.

Some steps cannot be stopped halfway: a program's start (asyncio would kill the program
alone and wait for pipes a process it started holds open), a walk handing a workspace to a
sandbox user (stopped halfway, the workspace is half handed over). The caller learns whether
it was cancelled, puts things right, and raises the cancellation itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ("uninterrupted",)

T = TypeVar("T")


async def uninterrupted(work: Awaitable[T]) -> tuple[T, bool]:
    """`work`'s result once it has ended, and whether the caller was cancelled meanwhile."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while True:
        try:
            return await asyncio.shield(task), cancelled
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            cancelled = True
