"""bus.ChildProcess, the process control behind the embedded server, `parley up` and chaos runs.

Real child processes (small Python programs); every wait is for a line or an exit, never a
sleep.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from bus import ChildProcess
from bus._process import LINE_LIMIT, exit_text

WAIT_S = 30.0


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


SLEEPER = _python("import time; print('ready', flush=True); time.sleep(600)")


class Exits:
    """The exit codes a child reports, on its reader thread."""

    def __init__(self) -> None:
        self.codes: list[int] = []
        self._exited = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self._exited.set()

    def wait(self) -> list[int]:
        assert self._exited.wait(WAIT_S), "the child did not exit"
        return self.codes


def test_lines_reach_the_caller_in_order_then_the_exit_code(tmp_path: Path) -> None:
    lines: list[str] = []
    exits = Exits()
    child = ChildProcess(
        _python(
            "import sys; print('one', flush=True); print('ready', flush=True); "
            "print('two', file=sys.stderr, flush=True)"
        ),
        ready_mark="ready",
        on_line=lines.append,
        on_exit=exits,
        log_path=tmp_path / "child.log",
    )
    child.start()
    assert exits.wait() == [0]
    assert lines == ["one", "ready", "two"]
    child.reap(WAIT_S)
    assert child.pid is None and not child.running()
    assert (tmp_path / "child.log").read_text() == "one\nready\ntwo\n"


def test_stop_continues_a_paused_child_so_sigterm_ends_it() -> None:
    exits = Exits()
    child = ChildProcess(SLEEPER, ready_mark="ready", on_exit=exits)
    child.start()
    assert child.wait_ready(WAIT_S)
    child.send(signal.SIGSTOP)
    child.stop(WAIT_S)  # without SIGCONT it would sit out the grace period, then be killed
    assert exits.wait() == [-signal.SIGTERM]
    assert exit_text(-signal.SIGTERM) == "signal SIGTERM"
    assert not child.running() and not child.wait_ready(0)


def test_a_child_that_exits_before_its_ready_line_is_not_ready() -> None:
    exits = Exits()
    child = ChildProcess(_python("import sys; sys.exit(3)"), ready_mark="ready", on_exit=exits)
    child.start()
    assert not child.wait_ready(WAIT_S)
    assert exits.wait() == [3]
    assert exit_text(3) == "code 3"
    child.reap(WAIT_S)


def test_an_over_long_line_is_cut_for_the_caller_and_whole_in_the_log(tmp_path: Path) -> None:
    lines: list[str] = []
    exits = Exits()
    child = ChildProcess(
        _python(f"print('x' * {LINE_LIMIT * 2 + 10}); print('after')"),
        on_line=lines.append,
        on_exit=exits,
        log_path=tmp_path / "child.log",
    )
    child.start()
    assert exits.wait() == [0]
    assert lines == ["x" * LINE_LIMIT + " [line truncated]", "after"]
    assert (tmp_path / "child.log").stat().st_size == LINE_LIMIT * 2 + 10 + len("\nafter\n")
    child.reap(WAIT_S)


def test_a_killed_child_starts_again() -> None:
    exits = Exits()
    child = ChildProcess(SLEEPER, ready_mark="ready", on_exit=exits)
    child.start()
    assert child.wait_ready(WAIT_S)
    child.kill()
    assert exits.wait() == [-signal.SIGKILL]
    child.start()  # as a chaos run restarts an actor it killed
    assert child.wait_ready(WAIT_S)
    child.stop(WAIT_S)
    assert not child.running()
