"""Room for the messages a consumer loop holds in flight (bus/_consumer.py)."""

from __future__ import annotations

import asyncio

__all__ = ("Slots",)


class Slots:
    """Room for messages in flight: taken a fetch at a time, given back a batch at a time.

    A semaphore would take a fetch's room one slot (and one await) at a time: 64 of them for
    every fetch, however few messages it brings, which showed in the gate's profile.
    """

    def __init__(self, size: int) -> None:
        self.free = size
        self.freed = asyncio.Event()

    def take(self, most: int) -> int:
        taken = min(self.free, most)
        self.free -= taken
        if not self.free:
            self.freed.clear()
        return taken

    def release(self, count: int) -> None:
        if count > 0:
            self.free += count
            self.freed.set()
