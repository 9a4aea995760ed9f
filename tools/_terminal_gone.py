"""When the person's terminal goes away under a waiting command: the session is still stopped.

Closing a terminal hangs it up: the kernel sends SIGHUP, and from then on every write to it
fails with `EIO`. The two race. A command printing a turn when the window closed got the
`OSError` before its SIGHUP handler ran, and the error ended it before the Stop was sent: the
session ran on to its cap with nobody watching (with real models, paid calls). So a waiting
command's standard output and error are wrapped (`guarded_output`): a write that finds the
terminal gone is dropped, the streams are pointed at `/dev/null` for the rest of the run
(`silence_terminal`), and whoever registered with `when_terminal_gone` (the command's stop,
tools/_waiting.py) is told, as SIGHUP tells it. Every other error of a write is raised as
before (`BrokenPipeError` included: `parley … | head`, tools/_errors.py).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO, cast

__all__ = ("guarded_output", "silence_terminal", "when_terminal_gone")

_callbacks: list[Callable[[], None]] = []


def when_terminal_gone(callback: Callable[[], None]) -> None:
    """Call `callback` (once per loss) when a write finds the terminal hung up."""
    _callbacks.append(callback)


def silence_terminal() -> None:
    """Point standard output and error at `/dev/null`: a hung-up terminal takes no more
    writes, and what is still buffered for it goes nowhere instead of failing again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in (1, 2):
            os.dup2(devnull, fd)
    finally:
        os.close(devnull)


class _HangupSafe:
    """A text stream passing everything to `inner`, but a write or flush that fails with
    `EIO` (the terminal hung up) silences the terminal and tells the callbacks instead."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:  # encoding, buffer, …: the stream's own
        return getattr(self._inner, name)

    def _gone(self) -> None:
        silence_terminal()
        for callback in _callbacks:
            callback()

    def write(self, text: str) -> int:
        try:
            return self._inner.write(text)
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._inner.flush()
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            self._gone()
            with contextlib.suppress(OSError):  # to /dev/null now
                self._inner.flush()

    def isatty(self) -> bool:
        return self._inner.isatty()

    def fileno(self) -> int:
        return self._inner.fileno()


@contextlib.contextmanager
def guarded_output() -> Iterator[None]:
    """Wrap `sys.stdout` and `sys.stderr` for the duration of a waiting command."""
    saved = sys.stdout, sys.stderr
    sys.stdout = cast(TextIO, _HangupSafe(sys.stdout))
    sys.stderr = cast(TextIO, _HangupSafe(sys.stderr))
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
        _callbacks.clear()
