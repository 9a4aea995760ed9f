"""The `scale` row's registry figure: what many registered agents' heartbeats cost the system.

Every agent host writes `profile.<name>` to the registry bucket once when it starts and
`heartbeat.<name>` every `heartbeat_s` (bus/_heartbeat.py, actors/agent/_host.py; the relay
does both for each shared agent it hosts). Nobody subscribes to those writes: the router
reads one agent's heartbeat when a reminder about a call to it fires (actors/router/
_watcher.py), the gate and the router are the actors granted reads of the bucket, and the
console lists profile names on demand. So what N agents cost is the nats-server storing
N / heartbeat_s writes a second, plus whatever the readers spend while it does.

The figure: one driver (this process) registers N agents and beats for each of them the way
their hosts would, same subjects, same payloads (`ProfileSummary`, `ActorHeartbeat`), each
agent every `heartbeat_s` of the real settings, the agents' beats spread over the period as
hosts started at different moments would, each put awaiting its acknowledgement as a host's
does. The readers, the gate and the router, run as real processes under the supervisor on a
real nats-server with the provisioned namespace. Their CPU and the server's (utime + stime
from /proc/<pid>/stat) over a measured window, per second of wall time, is the percentage of
one core; the window is measured once idle (no agents) and once beating, so the agents' own
share is the difference. The aim is on the beating total of the readers and the server.

A run in which the driver fell behind (fewer beats stored than were due) or a put failed is
not a measurement of N agents: it fails the figure whatever the CPU.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import msgspec
import nats
from nats.js.kv import KeyValue

from actors.gate import BUNDLE_KEY
from bus import EmbeddedServer, Supervisor, load_settings, provision, scratch_directory
from schemas import (
    ActorHeartbeat,
    Namespace,
    ProfileSummary,
    encode,
    heartbeat_key,
    profile_key,
    utc_now,
)
from tools.bench._cpu import _stat
from tools.bench._system import _bench_bundle
from tools.demo import demo_topology, sign_bundle

__all__ = ("AIM_CORE_PCT", "READERS", "registry_scale")

AIM_CORE_PCT: Final = 10.0
"""The aim: the readers and the server together under 10% of one core (issue 35)."""

READERS: Final = ("gate", "router")
"""The actors granted reads of the registry bucket (tools/natsconf/_permissions.py)."""

_TICK_S: Final = 0.05
_KEPT_UP: Final = 0.95
"""The share of the beats due in the window that must be stored for the run to count."""


class _Driver:
    """Registers `count` agents and beats for each every `period_s`, spread over the period."""

    def __init__(self, kv: KeyValue, ns: Namespace, count: int, period_s: float) -> None:
        self._kv = kv
        self._period_s = period_s
        self._names = [f"scale-agent-{index:05d}" for index in range(count)]
        self._inputs = {name: (ns.deliver(name),) for name in self._names}
        self._started_at = utc_now()
        self.stored = 0
        self.failed = 0
        self.last_error = ""

    async def _put(self, key: str, value: bytes) -> None:
        try:
            await self._kv.put(key, value)
        except Exception as exc:  # counted: a failed put fails the figure
            self.failed += 1
            self.last_error = repr(exc)
        else:
            self.stored += 1

    def _beat_of(self, name: str) -> bytes:
        return encode(
            ActorHeartbeat(
                actor_id=name,
                kind="agent",
                pid=os.getpid(),
                started_at=self._started_at,
                beat_at=utc_now(),
                period_s=self._period_s,
                inputs=self._inputs[name],
            )
        )

    async def register(self) -> None:
        """Each agent's profile and first heartbeat, as a host writes them when it starts."""
        for first in range(0, len(self._names), 500):
            puts = []
            for name in self._names[first : first + 500]:
                summary = ProfileSummary(
                    name=name,
                    actor_id=name,
                    backend="scripted",
                    model="scale-model",
                    description="an agent registered by the scale row",
                    capabilities=("answer",),
                    written_at=utc_now(),
                )
                puts.append(self._put(profile_key(name), encode(summary)))
                puts.append(self._put(heartbeat_key(name), self._beat_of(name)))
            await asyncio.gather(*puts)

    async def beat(self, stopping: asyncio.Event) -> None:
        """Beat until `stopping`: agent i at i/N of each period, as staggered hosts do."""
        count = len(self._names)
        began = time.monotonic()
        done = 0  # beats issued since `began`
        pending: set[asyncio.Task[None]] = set()
        while not stopping.is_set():
            due = int((time.monotonic() - began) / self._period_s * count)
            for number in range(done, due):
                name = self._names[number % count]
                task = asyncio.ensure_future(self._put(heartbeat_key(name), self._beat_of(name)))
                pending.add(task)
                task.add_done_callback(pending.discard)
            done = max(done, due)
            try:
                async with asyncio.timeout(_TICK_S):
                    await stopping.wait()
            except TimeoutError:
                pass
        if pending:
            await asyncio.wait(pending)


def _cpu_s(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user and system) each named process has used so far."""
    used = {}
    for name, pid in pids.items():
        stat = _stat(pid)
        if stat is None:
            raise RuntimeError(f"{name} (pid {pid}) exited during the scale row")
        used[name] = stat[2]
    return used


async def _window(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """Each process's CPU over `seconds` of wall time, as a percentage of one core."""
    before, began = _cpu_s(pids), time.monotonic()
    await asyncio.sleep(seconds)  # the measured window itself, not a synchronisation
    after, wall = _cpu_s(pids), time.monotonic() - began
    return {name: (after[name] - before[name]) / wall * 100 for name in pids}


@asynccontextmanager
async def _readers(
    ns: Namespace, scratch: Path, sync_always: bool
) -> AsyncIterator[tuple[str, dict[str, int]]]:
    """A server and the registry's readers up and ready; (server URL, pid of each process)."""
    with EmbeddedServer(scratch / "nats", sync_always=sync_always) as server:
        nc = await nats.connect(server.url)
        try:
            js = nc.jetstream()
            await provision(js, ns)
            signed, public = await asyncio.to_thread(
                sign_bundle, msgspec.json.encode(_bench_bundle()), scratch / "keys"
            )
            await (await js.key_value(ns.bucket("policy"))).put(BUNDLE_KEY, signed)
        finally:
            await nc.close()
        topology = demo_topology(public, "demo", agents=())
        topology = topology.model_copy(
            update={"actor": tuple(c for c in topology.actor if c.name in READERS)}
        )
        ready = {name: asyncio.Event() for name in READERS}

        def on_line(name: str, line: str) -> None:
            if '"msg":"ready"' in line:
                ready[name].set()
            if '"level":"error"' in line or "Traceback" in line:
                print(f"[{name}] {line}", flush=True)

        env = {**os.environ, "NATS_URL": server.url, "PARLEY_MONITOR_URL": server.monitor_url}
        env["PARLEY_NAMESPACE"] = ns.root
        env["PARLEY_ALLOW_LAZY_FSYNC"] = "false" if sync_always else "true"
        supervisor = Supervisor(topology, base_env=env, on_line=on_line)
        stopping = asyncio.Event()
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(supervisor.run(stopping))
            try:
                await asyncio.wait_for(asyncio.gather(*(e.wait() for e in ready.values())), 60)
                pids = {name: supervisor.pid(name) for name in READERS}
                pids["nats-server"] = server.pid
                found = {name: pid for name, pid in pids.items() if pid is not None}
                if len(found) != len(pids):
                    raise RuntimeError(f"a process of the scale row is down: {pids}")
                yield server.url, found
            finally:
                stopping.set()


async def registry_scale(
    agents: int, window_s: float, *, aim_pct: float = AIM_CORE_PCT, sync_always: bool = True
) -> dict[str, Any]:
    """Register `agents` agents and beat for them; the readers' and server's CPU; verdict."""
    period_s = load_settings().heartbeat_s
    ns = Namespace("benchagents")
    with scratch_directory("parley-bench-agents-") as scratch:
        async with _readers(ns, Path(scratch), sync_always) as (url, pids):
            idle = await _window(pids, window_s)
            nc = await nats.connect(url)
            try:
                kv = await nc.jetstream().key_value(ns.bucket("registry"))
                driver = _Driver(kv, ns, agents, period_s)
                began = time.monotonic()
                await driver.register()
                registered_s = time.monotonic() - began
                stopping = asyncio.Event()
                beating = asyncio.ensure_future(driver.beat(stopping))
                try:
                    await asyncio.sleep(period_s)  # one period for every agent to beat once
                    stored_before = driver.stored
                    loaded = await _window(pids, window_s)
                    stored_in_window = driver.stored - stored_before
                finally:
                    stopping.set()
                    await beating
                state = (await nc.jetstream().stream_info(f"KV_{ns.bucket('registry')}")).state
            finally:
                await nc.close()
    due = agents / period_s * window_s
    kept_up = driver.failed == 0 and stored_in_window >= _KEPT_UP * due
    total = sum(loaded.values())
    readers = sum(loaded[name] for name in READERS)
    return {
        "agents": agents,
        "sync_always": sync_always,
        "heartbeat_s": period_s,
        "window_s": window_s,
        "register_s": registered_s,
        "beats_due_per_s": agents / period_s,
        "beats_stored_per_s": stored_in_window / window_s,
        "puts_failed": driver.failed,
        "last_error": driver.last_error,
        "registry_messages": state.messages,
        "registry_bytes": state.bytes,
        "kept_up": kept_up,
        "idle_core_pct": idle,
        "core_pct": loaded,
        "readers_core_pct": readers,
        "total_core_pct": total,
        "agents_core_pct": total - sum(idle.values()),
        "aims": {"total_core_pct": aim_pct},
        "pass": {"total_core_pct": kept_up and total < aim_pct},
        "measured": "utime+stime from /proc/<pid>/stat of the gate, the router and the "
        "nats-server over the window, per second of wall time; idle window before any agent",
    }
