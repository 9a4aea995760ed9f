"""Supervising actor processes: `parley up` starts a topology and keeps it running.

Erlang/OTP's one-for-one strategy: a child that exits is restarted on its own, after a short
backoff, and if children restart more than `intensity` times within `period` seconds the
supervisor gives up and stops everything, rather than crash-looping for ever. Each child's
output lines are passed on prefixed with its name. Stopping sends SIGTERM to every child and
SIGKILL to any still running after the grace period (bus/_process.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import tomllib
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bus._process import ChildProcess, actor_command, exit_text, stop_all
from bus._settings import ConfigError, describe_invalid
from schemas import check_token

__all__ = ("ChildSpec", "GiveUp", "Supervisor", "Topology", "load_topology")

log = logging.getLogger("parley.bus.supervisor")


class ChildSpec(BaseModel):
    """One actor process of a topology."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="The actor id: its subject token and log prefix.")
    run: str = Field(description="An actor kind (`echo`) or `module:Class`.")
    config: Path | None = None
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _token(cls, value: str) -> str:
        return check_token(value, "actor name")


class Topology(BaseModel):
    """A set of actors started together, with settings shared by all of them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    settings: dict[str, str | int | float | bool] = Field(default_factory=dict)
    actor: tuple[ChildSpec, ...] = Field(min_length=1)
    intensity: int = Field(default=5, ge=0)
    period_s: float = Field(default=30.0, gt=0)

    def child_env(self, child: ChildSpec) -> dict[str, str]:
        """Environment for `child`: the shared settings as PARLEY_* plus its own env."""
        env = {
            f"PARLEY_{k.upper()}": str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in self.settings.items()
        }
        env["PARLEY_ACTOR_ID"] = child.name
        env.update(child.env)
        return env


def load_topology(path: Path) -> Topology:
    """Read a topology TOML file; relative `config` paths are relative to the file.

    Raises:
        ConfigError: the file is missing, not TOML, or not a valid topology.
    """
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"topology not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"topology {path} is not valid TOML: {exc}") from None
    try:
        topology = Topology.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_invalid(f"invalid topology {path}", exc, "(topology)")) from None
    names = [child.name for child in topology.actor]
    if len(set(names)) != len(names):
        raise ConfigError(f"topology {path} names an actor twice: {names}")
    resolved = tuple(
        child.model_copy(update={"config": (path.parent / child.config).resolve()})
        if child.config is not None and not child.config.is_absolute()
        else child
        for child in topology.actor
    )
    return topology.model_copy(update={"actor": resolved})


class GiveUp(RuntimeError):
    """Children restarted more often than the intensity allows."""


@dataclass
class _Child:
    spec: ChildSpec
    process: ChildProcess | None = None


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
    """Run `callback` on the supervisor's loop, from a child's output thread."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:  # the loop is closed: nobody is left to tell
        pass


def _resolve(exited: asyncio.Future[int], code: int) -> None:
    if not exited.done():  # a supervising task cancelled while waiting cancelled it
        exited.set_result(code)


class Supervisor:
    """Start, restart and stop a topology's actor processes."""

    def __init__(
        self,
        topology: Topology,
        *,
        base_env: Mapping[str, str] | None = None,
        on_line: Callable[[str, str], None] | None = None,
        grace_s: float = 8.0,
        backoff_s: tuple[float, ...] = (0.1, 0.5, 1.0, 2.0),
    ) -> None:
        self.topology = topology
        self._base_env = dict(base_env if base_env is not None else os.environ)
        self._on_line = on_line or (lambda name, line: None)
        self._grace_s = grace_s
        self._backoff_s = backoff_s
        self._children = {spec.name: _Child(spec) for spec in topology.actor}
        self._restarts_all: deque[tuple[float, str]] = deque()

    def pid(self, name: str) -> int | None:
        """The current process id of child `name` (None while it is down)."""
        process = self._children[name].process
        return process.pid if process is not None and process.running() else None

    def command(self, spec: ChildSpec) -> list[str]:
        config = ("--config", str(spec.config)) if spec.config is not None else ()
        return actor_command(spec.run, spec.name, *config)

    async def run(self, stopping: asyncio.Event) -> None:
        """Run every child until `stopping` is set; raise `GiveUp` past the intensity."""
        gave_up = asyncio.Event()
        try:
            async with asyncio.TaskGroup() as tasks:
                for child in self._children.values():
                    tasks.create_task(self._supervise(child, stopping, gave_up))
                stop_wait = tasks.create_task(stopping.wait())
                give_up_wait = tasks.create_task(gave_up.wait())
                await asyncio.wait({stop_wait, give_up_wait}, return_when=asyncio.FIRST_COMPLETED)
                stopping.set()
                give_up_wait.cancel()
                await self._stop_all()  # children exit, so their supervising tasks end
        finally:
            await self._stop_all()
        if gave_up.is_set():
            raise GiveUp(self._keeps_dying())

    def _keeps_dying(self) -> str:
        """Who used up the intensity: each child's restarts within the period, most first."""
        counts: dict[str, int] = {}
        for _, name in self._restarts_all:
            counts[name] = counts.get(name, 0) + 1
        named = ", ".join(
            f"{name} {count}" for name, count in sorted(counts.items(), key=lambda nc: -nc[1])
        )
        return (
            f"more than {self.topology.intensity} restarts in {self.topology.period_s}s "
            f"(keeps dying: {named})"
        )

    def _start(self, child: _Child) -> asyncio.Future[int]:
        """Start `child`; return the future of its exit code, set once its output ended.

        Its output lines and its exit come from its reader thread and are handed to this
        loop in the order they happened, so "stopped" always follows the last line.
        """
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[int] = loop.create_future()
        name = child.spec.name
        process = ChildProcess(
            self.command(child.spec),
            name=name,
            env={**self._base_env, **self.topology.child_env(child.spec)},
            on_line=lambda line: _call_soon(loop, self._on_line, name, line),
            on_exit=lambda code: _call_soon(loop, _resolve, exited, code),
        )
        process.start()
        child.process = process
        self._on_line(name, f"started (pid {process.pid})")
        return exited

    async def _supervise(
        self, child: _Child, stopping: asyncio.Event, gave_up: asyncio.Event
    ) -> None:
        attempt = 0
        while not stopping.is_set():
            # Started without yielding to the loop, so never behind a _stop_all's back.
            code = await self._start(child)
            if stopping.is_set():
                self._on_line(child.spec.name, f"stopped ({exit_text(code)})")
                return
            now = time.monotonic()
            window = self._restarts_all
            window.append((now, child.spec.name))
            while window and now - window[0][0] > self.topology.period_s:
                window.popleft()
            if len(window) > self.topology.intensity:
                self._on_line(
                    child.spec.name,
                    f"exited ({exit_text(code)}); {len(window)} restarts within "
                    f"{self.topology.period_s}s exceeds intensity {self.topology.intensity}: "
                    "giving up",
                )
                gave_up.set()
                return
            delay = self._backoff_s[min(attempt, len(self._backoff_s) - 1)]
            attempt += 1
            self._on_line(child.spec.name, f"exited ({exit_text(code)}); restarting in {delay}s")
            try:
                async with asyncio.timeout(delay):
                    await stopping.wait()  # the backoff, cut short by a stop
            except TimeoutError:
                pass

    async def _stop_all(self) -> None:
        running = [
            c.process
            for c in self._children.values()
            if c.process is not None and c.process.running()
        ]
        if running:
            await asyncio.to_thread(stop_all, running, self._grace_s)
