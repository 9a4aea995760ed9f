"""Actor processes a chaos run can kill, pause, resume and start again.

`parley up`'s supervisor restarts what dies on its own schedule; a chaos run needs to decide
itself when a killed actor comes back, and to stop and continue one, so it keeps its own
children (`bus.ChildProcess`), and starts again one that exits on its own
(tools/chaos/_keeper.py). Each child's output goes to a log file in the run's directory;
readiness is its "ready" log line, waited for without blocking the run's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from bus import ACTOR_READY, ChildProcess, actor_command

__all__ = ("actor_process", "wait_ready")


def actor_process(
    name: str,
    run: str,
    env: Mapping[str, str],
    log_path: Path,
    args: Sequence[str] = (),
    on_exit: Callable[[int], None] | None = None,
) -> ChildProcess:
    """An actor process, not yet started, with its output appended to `log_path`.

    `args` go after `parley run RUN --id NAME` (a `--config` settings file); `on_exit` gets
    each exit code, on the child's reader thread (tools/chaos/_keeper.py).
    """
    return ChildProcess(
        actor_command(run, name, *args),
        name=name,
        env=env,
        ready_mark=ACTOR_READY,
        log_path=log_path,
        on_exit=on_exit,
    )


async def wait_ready(child: ChildProcess, timeout: float = 60.0) -> bool:
    """Whether `child` logged "ready" within `timeout` and is still running."""
    return await asyncio.to_thread(child.wait_ready, timeout)
