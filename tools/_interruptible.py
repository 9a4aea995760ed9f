"""A command that starts a system and tears it down (`parley demo`), stopped by Ctrl-C in one
line.

A Ctrl-C reached such a command as Python's `KeyboardInterrupt`, raised wherever the main
thread stood: inside asyncio's own machinery (a thread being started for a blocking stop, a
task group unwinding) as often as in the command's code, and a newcomer's walk saw 3
tracebacks and 30 lines for one Ctrl-C of `parley demo`, where docs/cli.md promises one line.
Here Ctrl-C, SIGTERM and SIGHUP are handled by the event loop instead: the first cancels the
command's task, whose `finally` blocks stop every actor and server it started, then one line
says so and the command exits 130. Later ones are ignored while it stops (each stop is
bounded: the supervisor kills an actor that outlives its grace, and every child dies with
its parent, bus/_lifeline.py). A signal ignored when the command started (`nohup`) stays
ignored.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Coroutine
from typing import Any, Final

__all__ = ("all_set", "run_interruptible")

_STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_INTERRUPTED: Final = 130


def all_set(events: list[asyncio.Event]) -> asyncio.Future[list[Any]]:
    """A future done when every event is set. Left waiting when the command is interrupted,
    its cancellation is taken here, not reported at exit as an exception never retrieved."""
    waiting = asyncio.ensure_future(asyncio.gather(*(event.wait() for event in events)))
    waiting.add_done_callback(lambda done: done.cancelled() or done.exception())
    return waiting


def run_interruptible(name: str, main: Coroutine[Any, Any, int]) -> int:
    """`asyncio.run(main)`, ended cleanly by the first stop signal (exit 130, one line)."""
    interrupted = False

    async def guarded() -> int:
        nonlocal interrupted
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()

        def interrupt() -> None:
            nonlocal interrupted
            if not interrupted and task is not None:
                interrupted = True
                task.cancel()

        for signum in _STOP_SIGNALS:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                loop.add_signal_handler(signum, interrupt)
        try:
            return await main
        except asyncio.CancelledError:
            if not interrupted:
                raise
            print(f"parley {name}: interrupted; everything it started is stopped", file=sys.stderr)
            return _INTERRUPTED

    try:
        return asyncio.run(guarded())
    finally:
        if interrupted:
            # Stopped: the process only exits now. A signal taken while the main thread waited
            # in C (a thread joined) runs its Python handler late, after the loop has put
            # Python's default back, and raised KeyboardInterrupt at interpreter shutdown.
            for signum in _STOP_SIGNALS:
                signal.signal(signum, signal.SIG_IGN)
