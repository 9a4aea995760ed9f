"""One server per store: an exclusive lock on a file in the store directory.

Two nats-servers on one JetStream store corrupt it: each holds its own index of the same
files, and the second's writes land behind the first's back (seen as `indexCacheBuf corrupt
record state`, a broken audit chain and a lost session). So whoever starts a server on a store
(`parley up`, the demo, a benchmark, a test) takes `flock(LOCK_EX)` on `<store>/parley.lock`
first, and a second owner is refused at once with the first's pid and URL, which the holder
writes into the file.

The lock is an open file description: it is released when every process holding it has closed
it or died, never left behind by a crash. The server inherits it (`pass_fds`), so a store stays
locked until both its owner and the server are gone: a server that outlived its owner for a
moment (it dies of its parent-death signal, bus/_lifeline.py) still keeps a new one off.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from bus._settings import ConfigError

__all__ = ("StoreInUseError", "StoreLock")

LOCK_NAME = "parley.lock"


class StoreInUseError(ConfigError):
    """Another process runs a server on this store."""


class StoreLock:
    """The lock on one store directory, held from `acquire()` to `release()`."""

    def __init__(self, store_dir: Path) -> None:
        self.path = store_dir / LOCK_NAME
        self._fd: int | None = None

    @property
    def fd(self) -> int | None:
        """The locked descriptor, for the server to inherit; None while not held."""
        return self._fd

    def acquire(self) -> None:
        """Lock the store (a no-op when already held here).

        Raises:
            StoreInUseError: another process holds it; the message names it.
        """
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
            os.close(fd)
            raise StoreInUseError(
                f"the store {self.path.parent} is in use by {holder or 'another process'}: "
                "stop that one first (two servers on one store corrupt it)"
            ) from None
        self._fd = fd
        self.describe("starting")

    def describe(self, url: str) -> None:
        """Say who holds the lock, for the error a second owner gets: this pid and `url`."""
        if self._fd is None:
            return
        text = f"pid {os.getpid()} ({url})\n".encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, text, 0)

    def release(self) -> None:
        """Close this process's hold; the lock is free once a server that inherited it is
        gone too."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
