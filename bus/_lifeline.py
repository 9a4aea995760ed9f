"""Children that die with their parent, whatever kills it.

Every process Parley starts for itself (bus/_process.py) is started in a session of its own,
so a terminal's Ctrl-C reaches only the parent, which then stops its children in order. That
same session cuts the child off from its parent's death: SIGKILL the parent, or close its
terminal (SIGHUP), and its nats-server and actors used to keep running, and the next
`parley up` started a second server on the same store.

The tie is Linux's parent-death signal (`prctl(PR_SET_PDEATHSIG)`): the kernel sends the
child SIGKILL the moment its parent is gone, however it went. Three choices make it safe:

- It is set by a shim, not in a `preexec_fn`. A `preexec_fn` runs Python between `fork` and
  `exec` in a copy of a process that has other threads (output readers, asyncio's workers),
  where a lock another thread held at the fork never opens again. The shim is a fresh,
  single-threaded interpreter (`python -I -S -c ...`) that sets the signal, checks its parent
  did not die before it did, and `exec`s the real program in its own place: same pid, and the
  signal survives the `exec`. It costs one bare interpreter start (a few milliseconds).
- Children are forked by one thread that lives as long as the process. The kernel's "parent"
  is the thread that forked the child, not the process: a child forked by an
  `asyncio.to_thread` worker would be killed when that worker thread ends. `spawn` runs
  every fork on a daemon thread that never ends before the process does.
- Not a pipe the child watches: nats-server cannot watch one, and a watcher process of its
  own would put a second pid between the parent and the process it signals.

SIGKILL, not SIGTERM: a parent that is gone cannot escalate a SIGTERM that hangs, and every
part of Parley is built to be SIGKILLed without losing anything (the chaos runs prove it;
nats-server writes with `sync_interval: always`).

A child's own children (an agent's local subprocess brain) are tied to it the same way, with
`owned_argv`, forked from the actor's main thread, which lives as long as the actor.

Elsewhere than Linux there is no parent-death signal: `owned_argv` returns the command as
given, and children outlive a parent killed hard, as before.
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ("PARENT_DEATH_SIGNAL", "owned_argv", "spawn", "stop_like_interrupt")

PARENT_DEATH_SIGNAL = signal.SIGKILL
"""What a child gets when its parent dies."""

_PR_SET_PDEATHSIG = 1

_SHIM = f"""\
import ctypes, os, sys
parent, signum, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl({_PR_SET_PDEATHSIG}, signum, 0, 0, 0) != 0:
    sys.exit("cannot set the parent-death signal: " + os.strerror(ctypes.get_errno()))
if os.getppid() != parent:
    os._exit(1)
try:
    os.execvp(argv[0], argv)
except OSError as exc:
    sys.stderr.write(f"cannot run {{argv[0]}}: {{exc}}\\n")
    os._exit(127)
"""

T = TypeVar("T")


def owned_argv(argv: Sequence[str]) -> list[str]:
    """`argv` run through the shim, so its process gets SIGKILL when the thread that forks
    it (`spawn`'s, or a process's main thread) is gone. The pid is the program's own."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    parent = str(os.getpid())
    shim = [sys.executable, "-I", "-S", "-c", _SHIM, parent, str(int(PARENT_DEATH_SIGNAL))]
    return [*shim, *argv]


class _Spawner:
    """One daemon thread that runs every fork: it ends only with the process."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = (
            queue.SimpleQueue()
        )
        threading.Thread(target=self._serve, daemon=True, name="parley child spawner").start()

    def _serve(self) -> None:
        while True:
            make, result = self._jobs.get()
            try:
                result.set_result(make())
            except BaseException as exc:
                result.set_exception(exc)

    def run(self, make: Callable[[], T]) -> T:
        result: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._jobs.put((make, result))
        return result.result()


_spawner: _Spawner | None = None
_spawner_lock = threading.Lock()


def spawn(make: Callable[[], T]) -> T:
    """Run `make` (a `subprocess.Popen(owned_argv(...))`) on the spawner thread and return
    what it returns, or raise what it raised."""
    global _spawner
    with _spawner_lock:
        if _spawner is None or _spawner.pid != os.getpid():  # none yet, or a forked copy
            _spawner = _Spawner()
        spawner = _spawner
    return spawner.run(make)


def stop_like_interrupt() -> None:
    """SIGTERM and SIGHUP (a closed terminal) stop this command as Ctrl-C does: the
    `KeyboardInterrupt` unwinds it through its `finally` blocks, which stop its children.
    For commands run by `asyncio.run` that install no handlers of their own."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.default_int_handler)
