"""The benchmark's tools row: a 4 KiB File.Read through the gate and the tool runtime, against
raw nats-py doing the same read, one call at a time (issue 31's aim: p50 within 2x).

Three paths on one embedded nats-server, each answering the same `tool_request` (File.Read of
a 4 KiB file in the session's workspace) with a `tool_result` carrying its text:

- `parley`: an agent-side client publishes the request on its submit subject (a stored,
  acknowledged JetStream publish); the gate (a real process, with a signed bundle granting
  the agent File.Read in its workspace) checks it against the scope, records and delivers it;
  the tool runtime (`parley run tools`, a real process) marks the step as started (create-only),
  checks the scope again on the real file system, reads the file, stores the result over the
  mark, then submits the result, which the gate checks against the open call and delivers to
  the agent. Every store is acknowledged once stored, and each step runs at most once.
- `raw` and `guarded` (tools/bench/_rawtools.py): core request/reply to a responder process
  that reads the file (nothing stored, nothing checked), and the same stores as Parley's path
  in its order, done with nats-py alone in one process.

Calls are sequential (one in flight), each to a fresh step id, so every Parley call runs its
step (no stored result is replayed). Each round runs every path's calls in turn, the order
alternating from round to round so machine noise hits all alike. Each path's row also gives
the CPU every process of the run (the server, the gate, the runtime, the responders; not the
client) spent while its calls were in flight, per call (tools/bench/_cpu.py). The verdict compares
Parley's p50 with the raw path's; `parley / guarded` says what Parley adds over the floor its
guarantees set.

The row runs twice: on a server that fsyncs every write (`sync_interval: always`, as `parley
up` runs it, and the setting the aim is judged on) and on one that leaves writes to the
kernel (`lazy`), which shows how much of each path's time is the disk's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import uvloop
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from actors.gate import BUNDLE_KEY
from bus import (
    ChildSpec,
    EmbeddedServer,
    Supervisor,
    Topology,
    TraceHeaders,
    owned_argv,
    provision,
    python_command,
    scratch_directory,
)
from schemas import (
    Error,
    Namespace,
    ToolRequest,
    ToolResult,
    decode_envelope,
    encode,
    new_id,
    utc_now,
)
from tools.bench._cpu import CpuSample, Descendants
from tools.bench._kit import percentile_us
from tools.bench._rawtools import AGENT, STEP, raw_subject
from tools.demo import sign_bundle

__all__ = ("AIM_RATIO", "FILE_BYTES", "PATHS", "summarise_tools", "tools_rows", "tools_step")

AIM_RATIO = 2.0
"""Issue 31's aim: Parley's p50 at most twice the raw path's."""
FILE_BYTES = 4096
PATHS = ("raw", "guarded", "parley")
_SESSION = "benchsession"
_FILE = "data/four-kib.txt"
_WARM_UP_CALLS = 10
_CALL_TIMEOUT_S = 30.0
_RUN_REFERENCE = "import asyncio, sys; from tools.bench._rawtools import run_reference; " + (
    "asyncio.run(run_reference(*sys.argv[1:5]))"
)
_LIMITS = {"rate_per_minute": 10**9, "trace_message_budget": 10**9, "max_concurrent_calls": 10**6}


def _bundle() -> dict[str, Any]:
    return {
        "schema_version": "1.0",
        "version": 1,
        "tenant_id": "bench",
        "expires_at": "2099-01-01T00:00:00Z",
        "profiles": {
            "tools": _LIMITS,  # the runtime only answers
            AGENT: {
                **_LIMITS,
                "allowed_targets": ["tools"],
                "start_traces": True,
                "capabilities": ["File.Read"],
                "scopes": [{"name": "File.Read", "allowed_paths": ["."]}],
            },
        },
    }


def _request() -> ToolRequest:
    return ToolRequest(
        id=new_id(),
        created_at=utc_now(),
        tool_name="File.Read",
        arguments={"path": _FILE},
        session_id=_SESSION,
        task_id="benchtask",
        step_id=new_id(),
    )


class _Answers:
    """The agent's deliveries, live: wakes the caller when the step it waits for is answered."""

    def __init__(self) -> None:
        self.step = ""
        self.answered = asyncio.Event()
        self.problem = ""

    def expect(self, step: str) -> None:
        self.step = step
        self.answered.clear()

    async def on_parley(self, msg: Msg) -> None:
        result = decode_envelope(msg.data)
        if isinstance(result, Error):  # the gate refused the request: the row cannot measure
            self.problem = f"the gate refused it: {result.code}: {result.message}"
            self.answered.set()
        elif isinstance(result, ToolResult) and result.step_id == self.step:
            if result.status != "succeeded" or len(result.output_text or "") != FILE_BYTES:
                self.problem = f"{result.status}: {result.error}"
            self.answered.set()

    async def on_guarded(self, msg: Msg) -> None:
        if (msg.headers or {}).get(STEP) == self.step:
            self.answered.set()


Call = Callable[[], Awaitable[float]]


def _stored_call(nc: NATS, ns: Namespace, answers: _Answers, traced: bool) -> Call:
    """A call whose request is stored first: Parley's (with its trace headers) or guarded."""

    async def call() -> float:
        request = _request()
        answers.expect(request.step_id)
        # A call starting its own trace is one hop deep, as the gate records it.
        position = TraceHeaders(trace_id=request.id, hop_count=1, origin=AGENT)
        headers = position.to_headers(request.id)
        started = time.perf_counter()
        await nc.jetstream().publish(
            ns.submit(AGENT), encode(request), headers=headers if traced else None
        )
        await asyncio.wait_for(answers.answered.wait(), _CALL_TIMEOUT_S)
        elapsed = time.perf_counter() - started
        if answers.problem:
            raise RuntimeError(f"the tools row's File.Read did not succeed: {answers.problem}")
        return elapsed

    return call


def _raw_call(nc: NATS, ns: Namespace) -> Call:
    async def call() -> float:
        started = time.perf_counter()
        reply = await nc.request(raw_subject(ns), encode(_request()), timeout=_CALL_TIMEOUT_S)
        result = decode_envelope(reply.data)
        elapsed = time.perf_counter() - started
        if not isinstance(result, ToolResult) or len(result.output_text or "") != FILE_BYTES:
            raise RuntimeError(f"the raw responder answered {result!r}")
        return elapsed

    return call


@contextlib.asynccontextmanager
async def _references(url: str, roots: dict[str, str], workspaces: Path) -> AsyncIterator[None]:
    """The raw and guarded responders, each a process of its own, past binding."""
    children = []
    try:
        for path, root in roots.items():
            argv = python_command("-c", _RUN_REFERENCE, path, url, root, str(workspaces))
            child = await asyncio.create_subprocess_exec(
                *owned_argv(argv), stdout=asyncio.subprocess.PIPE
            )
            children.append(child)
            assert child.stdout is not None  # noqa: S101 - asked for above
            line = await asyncio.wait_for(child.stdout.readline(), 30)
            if line.strip() != b"ready":
                raise RuntimeError(f"the {path} reference did not start")
        yield
    finally:
        for child in children:
            if child.returncode is None:
                child.terminate()
            await child.wait()


@contextlib.asynccontextmanager
async def _parley(
    server: EmbeddedServer, nc: NATS, ns: Namespace, scratch: Path, workspaces: Path
) -> AsyncIterator[None]:
    """The gate and the tool runtime, real processes under the supervisor, both ready."""
    js = nc.jetstream()
    signed, public = await asyncio.to_thread(
        sign_bundle, json.dumps(_bundle()).encode(), scratch / "keys"
    )
    await (await js.key_value(ns.bucket("policy"))).put(BUNDLE_KEY, signed)
    keys = {"policy_keys": [str(public)], "tenant": "bench"}
    topology = Topology(
        settings={"log_level": "info"},  # as `parley up`: each step logs its start
        actor=(
            ChildSpec(name="gate", run="gate", env={"PARLEY_OPTIONS": json.dumps(keys)}),
            ChildSpec(
                name="tools",
                run="tools",
                env={"PARLEY_OPTIONS": json.dumps({**keys, "workspaces": str(workspaces)})},
            ),
        ),
    )
    ready = {name: asyncio.Event() for name in ("gate", "tools")}

    def on_line(name: str, line: str) -> None:
        if '"msg":"ready"' in line:
            ready[name].set()
        if '"level":"error"' in line or "Traceback" in line:
            print(f"[{name}] {line}", flush=True)

    env = {**os.environ, "NATS_URL": server.url, "PARLEY_NAMESPACE": ns.root}
    supervisor = Supervisor(topology, base_env=env, on_line=on_line)
    stopping = asyncio.Event()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(supervisor.run(stopping))
        try:
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in ready.values())), 60)
            yield
        finally:
            stopping.set()


@dataclass
class _Measured:
    """Call durations (seconds), and the CPU every process of the run spent during them."""

    durations: list[float] = field(default_factory=list)
    cpu: CpuSample = field(default_factory=CpuSample)

    def cpu_ms(self) -> dict[str, float]:
        """CPU per call of every process (the server's share apart), in milliseconds."""
        calls = max(len(self.durations), 1)
        total = self.cpu.server_s + self.cpu.others_s
        return {"cpu_ms": total * 1000 / calls, "server_cpu_ms": self.cpu.server_s * 1000 / calls}


async def _calls(call: Call, count: int, measured: _Measured, processes: Descendants) -> None:
    for _ in range(count):
        before = processes.cpu()
        measured.durations.append(await call())
        measured.cpu += processes.cpu() - before


async def tools_rows(calls: int, rounds: int, fsync: bool = True) -> dict[str, _Measured]:
    """Every path's calls, `calls` a round, `rounds` alternating rounds, on a server that
    fsyncs every write (`fsync`) or leaves it to the kernel."""
    roots = {path: f"benchtools{path}" for path in PATHS}
    measured = {path: _Measured() for path in PATHS}
    with scratch_directory("parley-bench-tools-") as directory:
        scratch = Path(directory)
        workspaces = scratch / "workspaces"
        (workspaces / _SESSION / _FILE).parent.mkdir(parents=True, mode=0o700)
        (workspaces / _SESSION / _FILE).write_bytes(b"x" * (FILE_BYTES - 1) + b"\n")
        server = EmbeddedServer(scratch / "nats", sync_always=fsync)
        await asyncio.to_thread(server.start)
        nc = await nats.connect(server.url)
        try:
            ns = {path: Namespace(root) for path, root in roots.items()}
            for namespace in ns.values():
                await provision(nc.jetstream(), namespace)
            answers = _Answers()
            await nc.subscribe(ns["parley"].deliver(AGENT), cb=answers.on_parley)
            await nc.subscribe(ns["guarded"].deliver(AGENT), cb=answers.on_guarded)
            references = {path: roots[path] for path in ("raw", "guarded")}
            async with (
                _parley(server, nc, ns["parley"], scratch, workspaces),
                _references(server.url, references, workspaces),
            ):
                paths = {
                    "raw": _raw_call(nc, ns["raw"]),
                    "guarded": _stored_call(nc, ns["guarded"], answers, traced=False),
                    "parley": _stored_call(nc, ns["parley"], answers, traced=True),
                }
                processes = Descendants()
                for call in paths.values():
                    await _calls(call, _WARM_UP_CALLS, _Measured(), processes)
                for turn in range(rounds):
                    for path in PATHS if turn % 2 == 0 else PATHS[::-1]:
                        await _calls(paths[path], calls, measured[path], processes)
        finally:
            await nc.close()
            await asyncio.to_thread(server.stop)
    return measured


def summarise_tools(
    samples: dict[str, list[float]], cpu: dict[str, dict[str, float]] | None = None
) -> dict[str, Any]:
    """Each path's p50/p99 (µs) and CPU per call (ms), Parley's ratios to the references,
    and the verdict against the aim (FAIL when a path has no samples: nothing measured
    passes nothing)."""
    rows = {
        path: {
            "calls": len(samples.get(path, [])),
            "p50_us": percentile_us(samples[path], 0.5) if samples.get(path) else 0.0,
            "p99_us": percentile_us(samples[path], 0.99) if samples.get(path) else 0.0,
            **(cpu or {}).get(path, {"cpu_ms": 0.0, "server_cpu_ms": 0.0}),
        }
        for path in PATHS
    }
    parley, raw, guarded = rows["parley"], rows["raw"], rows["guarded"]
    measured = all(row["calls"] for row in rows.values())
    ratio = parley["p50_us"] / raw["p50_us"] if measured else float("inf")
    return {
        **rows,
        "p50_parley_to_raw": ratio,
        "p99_parley_to_raw": parley["p99_us"] / raw["p99_us"] if measured else float("inf"),
        "p50_parley_to_guarded": parley["p50_us"] / guarded["p50_us"] if measured else 0.0,
        "aim_ratio": AIM_RATIO,
        "pass": measured and ratio <= AIM_RATIO,
    }


def print_tools(summary: dict[str, Any], fsync: str) -> None:
    print(f"\ntools: one {FILE_BYTES}-byte File.Read at a time, round trip (fsync {fsync})")
    print(f"{'path':<10}{'calls':>8}{'p50 µs':>12}{'p99 µs':>12}{'CPU ms (server)':>20}")
    for path in PATHS:
        row = summary[path]
        cpu = f"{row['cpu_ms']:.2f} ({row['server_cpu_ms']:.2f})"
        print(f"{path:<10}{row['calls']:>8}{row['p50_us']:>12.0f}{row['p99_us']:>12.0f}{cpu:>20}")
    verdict = "PASS" if summary["pass"] else "FAIL"
    print(
        f"parley / raw p50 {summary['p50_parley_to_raw']:.1f}x "
        f"(p99 {summary['p99_parley_to_raw']:.1f}x), aim <= {AIM_RATIO:g}x: {verdict}"
    )
    print(
        f"parley / guarded p50 {summary['p50_parley_to_guarded']:.2f}x "
        "(what Parley adds over the stores its guarantees take)"
    )


def tools_step(args: argparse.Namespace, result: dict[str, Any]) -> tuple[str, Callable[[], None]]:
    """The row as `parley bench` runs it: what it measures with these options, and the run."""

    def run() -> None:
        result["tools"] = {}
        for fsync in ("always", "lazy"):
            measured = uvloop.run(tools_rows(args.tool_calls, args.rounds, fsync == "always"))
            result["tools"][fsync] = summarise_tools(
                {path: m.durations for path, m in measured.items()},
                {path: m.cpu_ms() for path, m in measured.items()},
            )
            print_tools(result["tools"][fsync], fsync)

    what = f"tools: {args.tool_calls} File.Read calls a path a round, {args.rounds} rounds"
    return what, run
