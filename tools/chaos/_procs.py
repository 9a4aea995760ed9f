"""Actor processes a chaos run can kill, pause, resume and start again.

`parley up`'s supervisor restarts what dies on its own schedule; a chaos run needs to decide
itself when a killed actor comes back, and to stop and continue one, so it keeps its own
children. Each child's output goes to a log file in the run's directory; readiness is its
"ready" log line, waited for as an event.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

__all__ = ("Child",)

_READY = '"msg":"ready"'


class Child:
    """One actor process, restartable, with its output appended to `log_path`."""

    def __init__(
        self,
        name: str,
        run: str,
        env: Mapping[str, str],
        log_path: Path,
        args: Sequence[str] = (),
    ) -> None:
        """`args` go after `parley run RUN --id NAME` (a `--config` settings file)."""
        self.name = name
        self._argv = [sys.executable, "-m", "tools", "run", run, "--id", name, *args]
        self._env = dict(env)
        self._log_path = log_path
        self._process: subprocess.Popen[str] | None = None
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None
        self.starts = 0

    def start(self) -> None:
        """Start the process (again); `wait_ready()` then waits for its ready line."""
        self._ready = threading.Event()
        self._process = subprocess.Popen(
            self._argv,
            env=self._env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # Ctrl-C on the run must not reach the actors first
        )
        self.starts += 1
        self._reader = threading.Thread(
            target=self._read, args=(self._process.stdout, self._ready), daemon=True
        )
        self._reader.start()

    def _read(self, stream: IO[str] | None, ready: threading.Event) -> None:
        if stream is None:
            return
        with self._log_path.open("a") as log:
            for line in stream:
                log.write(line)
                if _READY in line:
                    ready.set()
        ready.set()  # exited: wake the waiter, which sees it is not running

    async def wait_ready(self, timeout: float = 60.0) -> bool:
        """Whether the process logged "ready" within `timeout` and is still running."""
        await asyncio.to_thread(self._ready.wait, timeout)
        return self._ready.is_set() and self.running()

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def send(self, signum: signal.Signals) -> None:
        if self.running() and self._process is not None:
            self._process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL, as a crash would, and reap it."""
        self.send(signal.SIGKILL)
        self._reap(10)

    def terminate(self, grace_s: float = 15.0) -> None:
        """SIGTERM (a graceful drain), SIGKILL if it outlives `grace_s`."""
        self.send(signal.SIGCONT)  # a paused process cannot drain
        self.send(signal.SIGTERM)
        self._reap(grace_s)

    def _reap(self, timeout: float) -> None:
        process = self._process
        if process is None:
            return
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if self._reader is not None:
            self._reader.join(5)
        if process.stdout is not None:
            process.stdout.close()
