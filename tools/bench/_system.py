"""The whole demo system as the benchmark's rows run it: real processes on one server.

One embedded nats-server (`sync_interval: always`), the namespace provisioned, a signed
policy whose rate limits a benchmark cannot reach, and the demo's processes (the gate, the
router, the auditor and two agent hosts whose scripted brains answer at once) started by the
supervisor as in production. The collaboration and latency rows both measure through it.
"""

from __future__ import annotations

import asyncio
import os
import tomllib
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import nats
from nats.aio.client import Client as NATS

from actors.gate import BUNDLE_KEY
from bus import EmbeddedServer, Supervisor, provision, scratch_directory
from schemas import Namespace
from tools.demo import DEMO_POLICY, demo_topology, sign_bundle

__all__ = ("RunningSystem", "demo_system")

_BENCH_LIMITS = {"rate_per_minute": 10_000_000, "trace_message_budget": 10_000}
_WAITED_FOR = ("gate", "router", "gpt", "claude")


class RunningSystem:
    """What a row measures with: the server's URL and a client connection to it."""

    def __init__(self, server: EmbeddedServer, nc: NATS, supervisor: Supervisor) -> None:
        self.server = server
        self.nc = nc
        self.supervisor = supervisor


def _bench_bundle() -> dict[str, Any]:
    bundle = tomllib.loads(DEMO_POLICY.read_text())
    for profile in bundle["profiles"].values():
        profile.update(_BENCH_LIMITS)
    return bundle


@asynccontextmanager
async def demo_system(
    ns: Namespace, child_env: Mapping[str, Mapping[str, str]] | None = None
) -> AsyncIterator[RunningSystem]:
    """The system up and every process ready (`"msg":"ready"` in its log); stopped on exit.

    A child's errors are printed as they happen, so a row that stalls says why. `child_env`
    adds environment variables to the children it names (an agent's profile, its settings).
    """
    with scratch_directory("parley-bench-system-") as scratch:
        server = EmbeddedServer(Path(scratch) / "nats")
        await asyncio.to_thread(server.start)
        nc = await nats.connect(server.url)
        stopping = asyncio.Event()
        ready = {name: asyncio.Event() for name in _WAITED_FOR}

        def on_line(name: str, line: str) -> None:
            if '"msg":"ready"' in line and name in ready:
                ready[name].set()
            if '"level":"error"' in line or "Traceback" in line:
                print(f"[{name}] {line}", flush=True)

        try:
            js = nc.jetstream()
            await provision(js, ns)
            signed, public = await asyncio.to_thread(
                sign_bundle, msgspec.json.encode(_bench_bundle()), Path(scratch) / "keys"
            )
            await (await js.key_value(ns.bucket("policy"))).put(BUNDLE_KEY, signed)
            env = {**os.environ, "NATS_URL": server.url, "PARLEY_MONITOR_URL": server.monitor_url}
            env["PARLEY_NAMESPACE"] = ns.root
            topology = demo_topology(public, "demo")
            children = tuple(
                c.model_copy(update={"env": {**c.env, **(child_env or {}).get(c.name, {})}})
                for c in topology.actor
            )
            topology = topology.model_copy(update={"actor": children})
            supervisor = Supervisor(topology, base_env=env, on_line=on_line)
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(supervisor.run(stopping))
                try:
                    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in ready.values())), 60)
                    yield RunningSystem(server, nc, supervisor)
                finally:
                    stopping.set()
        finally:
            await nc.close()
            await asyncio.to_thread(server.stop)
