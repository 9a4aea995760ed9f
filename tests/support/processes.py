"""Real OS processes for tests: start, read their output, wait for a line, signal them.

Waiting is always for a line of output (an event), with a timeout, never a sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUPPORT_PATH = str(REPO / "tests")


class ProcessOutput:
    """A child process whose merged output is collected line by line on a thread."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        name: str = "",
        cwd: Path = REPO,
    ) -> None:
        self.name = name or argv[-1]
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self.process = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=cwd,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_line_sync(
        self, pattern: str, *, start: int = 0, timeout: float = 20.0
    ) -> tuple[int, str]:
        """Block until a line at index >= `start` matches `pattern`; return (index, line)."""
        regex = re.compile(pattern)
        with self._cond:
            index = start
            ok = self._cond.wait_for(
                lambda: (
                    any(regex.search(line) for line in self.lines[start:])
                    or self.process.poll() is not None
                ),
                timeout,
            )
            for index in range(start, len(self.lines)):
                if regex.search(self.lines[index]):
                    return index, self.lines[index]
        tail = "\n".join(self.lines[-30:])
        state = "timed out" if not ok else f"exited with {self.process.returncode}"
        raise AssertionError(
            f"{self.name}: no line matching {pattern!r} ({state}); output:\n{tail}"
        )

    async def wait_line(
        self, pattern: str, *, start: int = 0, timeout: float = 20.0
    ) -> tuple[int, str]:
        return await asyncio.to_thread(self.wait_line_sync, pattern, start=start, timeout=timeout)

    def signal(self, signum: signal.Signals) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signum)

    def kill(self) -> int:
        self.signal(signal.SIGKILL)
        return self.process.wait(10)

    async def wait_exit(self, timeout: float = 15.0) -> int:
        return await asyncio.to_thread(self.process.wait, timeout)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self._reader.join(5)
        if self.process.stdout is not None:
            self.process.stdout.close()


def parley_env(url: str, namespace: str, **settings: str) -> dict[str, str]:
    """Environment for a `parley` child: the test server and namespace, and the support path."""
    env = dict(os.environ)
    env["NATS_URL"] = url
    env["PARLEY_NAMESPACE"] = namespace
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SUPPORT_PATH, env.get("PYTHONPATH")]))
    for key, value in settings.items():
        env[f"PARLEY_{key.upper()}"] = value
    return env


def start_actor(run: str, actor_id: str, env: Mapping[str, str], *extra: str) -> ProcessOutput:
    """Start `parley run RUN --id ACTOR_ID` as a real process."""
    argv = [sys.executable, "-m", "tools", "run", run, "--id", actor_id, *extra]
    return ProcessOutput(argv, env, name=actor_id)


READY = r'"msg":"ready"'


def parley_up(topology: Path | None, env: dict[str, str], *extra: str, cwd: Path) -> ProcessOutput:
    """`parley up` as a real process (no topology: the local system); it lives in
    `cwd`/.parley, which it claims (one `parley up` a directory): a test's own directory,
    never the checkout, where another test or a person's `parley up` may run."""
    named = [str(topology)] if topology is not None else []
    return ProcessOutput(
        [sys.executable, "-m", "tools", "up", *named, *extra], env, name="up", cwd=cwd
    )


def close_up(up: ProcessOutput) -> None:
    """Stop `parley up`; if it did not exit by itself (a failed test), kill what it started.

    Its actors and server die with it (bus/_lifeline.py); their pids, in its output, are
    killed too, so a test of that very promise leaves nothing behind when it fails.
    """
    leaked = up.process.poll() is None
    pids = [int(m.group(1)) for line in up.lines if (m := re.search(r"\(pid (\d+)\)", line))]
    up.close()
    if leaked:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _thread_states(pid: int) -> list[str]:
    """The scheduler state of each thread of `pid` (`T`: stopped), from /proc."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            stat = (task / "stat").read_text()
            states.append(stat.rsplit(")", 1)[1].split()[0])
    return states


async def stopped(pid: int, timeout: float = 10.0) -> None:
    """Return once every thread of process `pid` is stopped (SIGSTOP is asynchronous: a
    server's threads on another core go on working for a moment after `kill` returns, and a
    request sent then is answered). Polls `/proc`, 5 ms apart: the kernel announces a stop
    only to the process's parent, and the server's parent is a reader thread of its own.

    Raises:
        AssertionError: some thread still runs after `timeout`.
    """
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        states = _thread_states(pid)
        if states and all(state in ("T", "t") for state in states):
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"process {pid} not stopped after {timeout} s: {states}")
        await asyncio.sleep(0.005)
