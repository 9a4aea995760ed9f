"""Restarting an actor that exited on its own during a chaos run, as `parley up` would.

An actor exits by design when it meets an error it does not handle (exit code 3 when the bus
did not answer: a JetStream request that timed out while a cluster elected a leader), and
counts on its supervisor to start it again: its durable consumers lose nothing meanwhile
(bus/_runner.py, bus/_supervisor.py). A chaos run keeps its own children so its faults decide
when a killed actor comes back (tools/chaos/_procs.py), and before this module nothing
started again an actor that exited outside a fault: one gate that exited after a node's loss
left every submission unread for the rest of the run, and every session waiting on it failed
with `AGENT_UNAVAILABLE` at its turn timeout (docs/cluster.md, "Chaos on a cluster").

The keeper hears each child's exit (from its reader thread), ignores the exits a fault
causes (the fault holds the child while it kills, stops and starts it), and starts any other
one again after the supervisor's backoff. Each such exit is printed and kept (`exits`), so a
run shows what a deployment's supervisor would have had to do.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO

from bus import ChildProcess

__all__ = ("Keeper", "OwnExit")

BACKOFF_S = (0.1, 0.5, 1.0, 2.0)
"""The waits before starting an actor again, as `bus.Supervisor`'s, one step per exit."""


def _how(code: int) -> str:
    """`code 3`, or `signal SIGKILL` for a negative code."""
    if code >= 0:
        return f"code {code}"
    try:
        return f"signal {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"


@dataclass(frozen=True, slots=True)
class OwnExit:
    """An actor that exited while no fault was acting on it, and was started again."""

    actor: str
    code: int


class Keeper:
    """Starts again the children that exit on their own; leaves the faults' exits alone."""

    def __init__(self, children: dict[str, ChildProcess], out: TextIO) -> None:
        """`children` may still be empty: the runner adds each one it creates with `on_exit`
        of this keeper. Made inside the run's event loop, which it hears exits on."""
        self._children = children
        self._out = out
        self._loop = asyncio.get_running_loop()
        self._heard: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
        self._held: set[str] = set()
        self._steps: dict[str, int] = {}
        self.exits: list[OwnExit] = []
        self.changed = asyncio.Event()
        """Set each time an exit was judged (for a caller waiting on the keeper's word)."""
        self.judged = 0
        """Exits judged so far, held ones included."""

    def on_exit(self, name: str) -> Callable[[int], None]:
        """The `on_exit` callback for child `name`: called on its reader thread."""

        def exited(code: int) -> None:
            if self._loop.is_closed():
                return  # the run is over: children stopped at its end exit unheard
            try:
                self._loop.call_soon_threadsafe(self._heard.put_nowait, (name, code))
            except RuntimeError:  # the loop closed between the check and the call
                return

        return exited

    @contextmanager
    def holding(self, names: Iterable[str]) -> Iterator[None]:
        """While a fault kills, stops or starts `names`: their exits are the fault's."""
        held = set(names) - self._held
        self._held |= held
        try:
            yield
        finally:
            self._held -= held

    async def run(self) -> None:
        """Judge each exit heard until cancelled (at the run's end)."""
        while True:
            name, code = await self._heard.get()
            await self._judge(name, code)
            self.judged += 1
            self.changed.set()

    async def _judge(self, name: str, code: int) -> None:
        child = self._children.get(name)
        if child is None or name in self._held or child.running():
            return  # a fault's exit, or one from before the fault started it again
        step = self._steps.get(name, 0)
        self._steps[name] = step + 1
        delay = BACKOFF_S[min(step, len(BACKOFF_S) - 1)]
        print(
            f"chaos: {name} exited on its own ({_how(code)}); starting it again in "
            f"{delay} s, as a supervisor would",
            file=self._out,
            flush=True,
        )
        self.exits.append(OwnExit(name, code))
        await asyncio.sleep(delay)  # the supervisor's backoff, not a synchronisation
        if name not in self._held and not child.running():
            child.start()

    def summary(self) -> str:
        """One line for the run's end: which actors exited on their own, and how often."""
        if not self.exits:
            return "actors' own exits         0"
        counts: dict[str, int] = {}
        for own in self.exits:
            counts[own.actor] = counts.get(own.actor, 0) + 1
        listed = ", ".join(f"{actor}: {n}" for actor, n in sorted(counts.items()))
        return f"actors' own exits         {len(self.exits)} ({listed}), each started again"
