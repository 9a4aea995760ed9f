"""Child processes: start one, read its output, wait for its ready line, stop it, reap it.

The one implementation behind every process Parley starts for itself: the embedded
nats-server (bus/_embedded.py), the actors `parley up` supervises (bus/_supervisor.py) and the
actors a chaos run kills, pauses and restarts (tools.chaos).

Each child runs in a session of its own, so a terminal's Ctrl-C reaches only its parent, which
then stops the children in order instead of having them die first; and each dies with its
parent however the parent ends (SIGKILL, a closed terminal), tied to it by bus/_lifeline.py.
Its output is read line by line on a thread of its own, which serves a synchronous caller (a
test fixture starting the server) and an asynchronous one (the supervisor, bridging lines to
its event loop) alike. A line longer than `LINE_LIMIT` is passed on cut, marked
`[line truncated]`; the log file, if any, still gets every byte. Stopping sends SIGCONT (a
paused process cannot drain), then SIGTERM, and SIGKILL to whatever outlives the grace
period; every child is reaped.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, BinaryIO, Final, Literal

from bus._lifeline import owned_argv, spawn

__all__ = (
    "ACTOR_READY",
    "LINE_LIMIT",
    "ChildProcess",
    "actor_command",
    "exit_text",
    "python_command",
    "stop_all",
)

LINE_LIMIT = 1024 * 1024
"""Longest output line passed on whole (bytes)."""

ACTOR_READY = '"msg":"ready"'
"""What an actor's "ready" log line contains (bus/_runtime.py logs it, bus/_logging.py as JSON)."""

_KILL_WAIT_S = 10.0
_READER_JOIN_S = 5.0


PYTHON_PLACEHOLDER: Final = "{python}"
"""In a command line a person writes (an agent's subprocess brain, an MCP server), the
interpreter running Parley: a Python program it names finds Parley's packages and their
dependencies, whatever `python3` is on PATH."""


def python_command(*args: str) -> list[str]:
    """The command line of a Python child of Parley's own: this interpreter, `-P`.

    `-P` keeps the working directory off the front of `sys.path`. `parley up` runs in any
    directory, and Parley's packages have plain names (`tools`, `bus`, `schemas`): a person's
    own `tools/` package beside them was imported instead of Parley's by every child
    (`python -m tools run …`), which printed its lines or died, and `parley up` gave up.
    """
    return [sys.executable, "-P", *args]


def actor_command(run: str, actor_id: str, *args: str) -> list[str]:
    """The command line of an actor process: `parley run RUN --id ACTOR_ID ARGS...`."""
    return python_command("-m", "tools", "run", run, "--id", actor_id, *args)


def exit_text(code: int) -> str:
    """How a process ended, for a person: `code 2`, or `signal SIGKILL` for a negative code."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


class ChildProcess:
    """One child process, restartable: `start()` again after it was stopped or killed.

    `reads`: "both" reads stdout with stderr merged into it; "stderr" reads stderr only and
    discards stdout (nats-server logs to stderr). Each line (without its line end) goes to
    `on_line`, on the reader thread, before it is checked for `ready_mark`; `on_exit` gets
    the exit code, on the same thread, once the output ended and the process exited.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        name: str = "",
        env: Mapping[str, str] | None = None,
        reads: Literal["both", "stderr"] = "both",
        ready_mark: str | None = None,
        on_line: Callable[[str], None] | None = None,
        on_exit: Callable[[int], None] | None = None,
        log_path: Path | None = None,
        pass_fds: Sequence[int] = (),
    ) -> None:
        """`pass_fds`: descriptors the child inherits (the store lock, held while it lives)."""
        self.name = name
        self._pass_fds = tuple(pass_fds)
        self._argv = list(argv)
        self._env = dict(env) if env is not None else None
        self._reads = reads
        self._ready_mark = ready_mark
        self._on_line = on_line
        self._on_exit = on_exit
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._woken = threading.Event()
        self._ready_seen = False

    @property
    def pid(self) -> int | None:
        """The process id of the current process, until it is reaped."""
        return self._process.pid if self._process is not None else None

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the process (again); `wait_ready()` then waits for its ready line."""
        self._woken = threading.Event()
        self._ready_seen = False
        both = self._reads == "both"
        process = spawn(  # forked by a thread that ends only with this process
            lambda: subprocess.Popen(  # noqa: S603 - our own programs, never a shell
                owned_argv(self._argv),  # SIGKILLed when this process dies
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if both else subprocess.DEVNULL,
                stderr=subprocess.STDOUT if both else subprocess.PIPE,
                start_new_session=True,  # Ctrl-C reaches the parent, which stops them in order
                pass_fds=self._pass_fds,
            )
        )
        self._process = process
        stream = process.stdout if both else process.stderr
        self._reader = threading.Thread(
            target=self._read,
            args=(process, stream, self._woken),
            daemon=True,
            name=f"output of {self.name or self._argv[0]}",
        )
        self._reader.start()

    def _read(
        self, process: subprocess.Popen[bytes], stream: IO[bytes] | None, woken: threading.Event
    ) -> None:
        if stream is None:  # always piped by start(); keeps the type checker honest
            return
        log = self._log_path.open("ab") if self._log_path is not None else None
        try:
            self._pass_lines(stream, woken, log)
        finally:
            stream.close()
            if log is not None:
                log.close()
            woken.set()  # ended: wake the waiter, which sees it is not running
        code = process.wait()
        if self._on_exit is not None:
            self._on_exit(code)

    def _pass_lines(self, stream: IO[bytes], woken: threading.Event, log: BinaryIO | None) -> None:
        rest_of_long_line = False
        while raw := stream.readline(LINE_LIMIT):
            if log is not None:
                log.write(raw)
            whole = raw.endswith(b"\n")
            if rest_of_long_line:  # its beginning was passed on, marked as truncated
                rest_of_long_line = not whole
                continue
            line = raw.decode("utf-8", "replace").rstrip()
            if not whole and len(raw) == LINE_LIMIT:
                line += " [line truncated]"
                rest_of_long_line = True
            if self._on_line is not None:
                self._on_line(line)
            if self._ready_mark is not None and not self._ready_seen and self._ready_mark in line:
                self._ready_seen = True
                woken.set()

    @property
    def became_ready(self) -> bool:
        """Whether this run of the process printed its ready line (set before `on_exit` is
        called, on the same thread)."""
        return self._ready_seen

    def wait_ready(self, timeout: float) -> bool:
        """Whether the process printed its ready line within `timeout` and is still running."""
        self._woken.wait(timeout)
        return self._ready_seen and self.running()

    def send(self, signum: signal.Signals) -> None:
        """Send `signum` if the process is running (SIGSTOP, SIGCONT: a pause)."""
        if self._process is not None and self.running():
            self._process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL, as a crash would, and reap it."""
        self.send(signal.SIGKILL)
        self.reap(_KILL_WAIT_S)

    def stop(self, grace_s: float) -> None:
        """A graceful stop: SIGTERM, SIGKILL if it outlives `grace_s`; reaped either way."""
        stop_all([self], grace_s)

    def reap(self, timeout: float) -> None:
        """Wait up to `timeout` for the process to exit, SIGKILL it if it has not, collect
        its exit status and the end of its output."""
        process = self._process
        if process is None:
            return
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if self._reader is not None:
            self._reader.join(_READER_JOIN_S)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
        self._process = None


def stop_all(children: Sequence[ChildProcess], grace_s: float) -> None:
    """Stop `children` together: SIGTERM to each, then one grace period for all of them."""
    for child in children:
        child.send(signal.SIGCONT)  # a paused process cannot drain
        child.send(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for child in children:
        child.reap(max(deadline - time.monotonic(), 0.0))
