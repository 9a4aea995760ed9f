"""The benchmark's llm row: a streamed model call through the gate and the LLM gateway, against
a client reading the same local provider directly (issue 32's aims: time to the first chunk
within 1.2x of direct, the whole answer within 1.1x).

The provider (tools/bench/_llmserver.py, a process of its own) streams OpenAI's format: the
first chunk 50 ms after the request, then 100 chunks 5 ms apart.

- `direct`: httpx POSTs the body with `stream: true` and reads the events; the first chunk is
  the first content delta, the whole answer `data: [DONE]`.
- `parley`: an agent-side client publishes an `llm_request` with `stream` on its submit subject
  (a stored, acknowledged JetStream publish); the gate (a real process, with a signed bundle
  allowing the model) records and delivers it; the LLM gateway (`parley run llm`, a real
  process) streams from the provider and sends the text on core NATS to the agent
  (`Namespace.chunks`); the first chunk is the first with text there. The whole answer is the
  `llm_response` the gateway stores, submits and the gate delivers to the agent.

Calls are sequential, in alternating rounds. The verdict passes when both p50 ratios are
within their aims (FAIL when a path has no samples). Then one long answer (200 KB in
4-character pieces) goes the Parley path, for the gateway's CPU to stream it
(tools/bench/_llmlong.py; not judged).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import msgspec
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
    LlmChunk,
    LlmRequest,
    LlmResponse,
    Namespace,
    decode_envelope,
    encode,
    new_id,
    utc_now,
)
from tools.bench._kit import percentile_us
from tools.bench._llmlong import LONG_MODEL, long_figure, long_pieces, print_long
from tools.bench._llmserver import WORDS
from tools.demo import sign_bundle

__all__ = ("FIRST_AIM", "PATHS", "WHOLE_AIM", "llm_step", "summarise_llm")

FIRST_AIM = 1.2
WHOLE_AIM = 1.1
PATHS = ("direct", "parley")
_AGENT = "bench"
_MODEL = "bench-model"
_TEXT = "".join(WORDS)
_TIMEOUT_S = 30.0
_SERVE = "import asyncio; from tools.bench._llmserver import serve; asyncio.run(serve())"
_LIMITS = {"rate_per_minute": 10**9, "trace_message_budget": 10**9, "max_concurrent_calls": 10**6}
Call = Callable[[], Awaitable[tuple[float, float]]]
"""One call: seconds to its first chunk, and to its whole answer."""


def _bundle() -> dict[str, Any]:
    return {
        "schema_version": "1.0",
        "version": 1,
        "tenant_id": "bench",
        "expires_at": "2099-01-01T00:00:00Z",
        "llm_policy": {"allowed_models": [_MODEL, LONG_MODEL], "max_session_tokens": 10**9},
        "profiles": {
            "llm": _LIMITS,
            _AGENT: {**_LIMITS, "allowed_targets": ["llm"], "start_traces": True},
        },
    }


def _direct(client: httpx.AsyncClient) -> Call:
    body = {
        "model": _MODEL,
        "messages": [{"role": "user", "content": "write"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }

    async def call() -> tuple[float, float]:
        started = time.perf_counter()
        first = 0.0
        text = []
        async with client.stream("POST", "chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if line == "data: [DONE]":
                    break
                if line.startswith("data: "):
                    for choice in json.loads(line[6:]).get("choices") or []:
                        piece = (choice.get("delta") or {}).get("content")
                        if piece:
                            first = first or time.perf_counter() - started
                            text.append(piece)
        whole = time.perf_counter() - started
        if "".join(text) != _TEXT:
            raise RuntimeError("the direct read did not get the whole answer")
        return first, whole

    return call


class _Parley:
    """The agent's side of the Parley path: its chunks and its deliveries, live."""

    def __init__(self, nc: NATS, ns: Namespace) -> None:
        self.nc, self.ns = nc, ns
        self.request_id = ""
        self.first = asyncio.Event()
        self.answered = asyncio.Event()
        self.problem = ""
        self.expected = _TEXT

    async def on_chunk(self, msg: Msg) -> None:
        chunk = msgspec.json.decode(msg.data, type=LlmChunk)
        if chunk.request_id == self.request_id and chunk.text:
            self.first.set()

    async def on_delivery(self, msg: Msg) -> None:
        answer = decode_envelope(msg.data)
        if getattr(answer, "cause_id", None) == self.request_id or (
            isinstance(answer, LlmResponse) and answer.request_id == self.request_id
        ):
            if not isinstance(answer, LlmResponse):
                self.problem = f"the call was not answered: {answer!r}"[:300]
            elif answer.text != self.expected:
                code = answer.error.code if answer.error is not None else ""
                self.problem = f"the call was not answered whole: {answer.status} {code}"
            self.answered.set()

    async def call(self, wait_s: float = _TIMEOUT_S, model: str = _MODEL) -> tuple[float, float]:
        rid = new_id()
        self.request_id = rid
        self.expected = _TEXT if model == _MODEL else "".join(long_pieces())
        self.first.clear()
        self.answered.clear()
        request = LlmRequest(
            id=rid,
            created_at=utc_now(),
            request_id=rid,
            session_id="benchsession",
            task_id="benchtask",
            step_id=rid,
            model=model,
            messages=({"role": "user", "content": "write"},),
            stream=True,
        )
        headers = TraceHeaders(trace_id=rid, hop_count=1, origin=_AGENT).to_headers(rid)
        started = time.perf_counter()
        await self.nc.jetstream().publish(self.ns.submit(_AGENT), encode(request), headers=headers)
        await asyncio.wait_for(self.first.wait(), _TIMEOUT_S)
        first = time.perf_counter() - started
        await asyncio.wait_for(self.answered.wait(), wait_s)
        whole = time.perf_counter() - started
        if self.problem:
            raise RuntimeError(self.problem)
        return first, whole


@contextlib.asynccontextmanager
async def _provider() -> AsyncIterator[str]:
    """The streaming provider, a process of its own; its base URL."""
    child = await asyncio.create_subprocess_exec(
        *owned_argv(python_command("-c", _SERVE)), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None  # noqa: S101 - asked for above
        line = (await asyncio.wait_for(child.stdout.readline(), 30)).decode().split()
        if line[:1] != ["ready"]:
            raise RuntimeError("the llm row's provider did not start")
        yield f"http://127.0.0.1:{line[1]}/v1"
    finally:
        child.terminate()
        await child.wait()


@contextlib.asynccontextmanager
async def _parley(
    server: EmbeddedServer, nc: NATS, ns: Namespace, url: str
) -> AsyncIterator[Supervisor]:
    """The gate and the LLM gateway, real processes under the supervisor, both ready."""
    with scratch_directory("parley-bench-llm-") as directory:
        signed, public = await asyncio.to_thread(
            sign_bundle, json.dumps(_bundle()).encode(), Path(directory)
        )
        await (await nc.jetstream().key_value(ns.bucket("policy"))).put(BUNDLE_KEY, signed)
        keys = {"policy_keys": [str(public)], "tenant": "bench"}
        gateway = {
            **keys,
            "providers": {"local": {"api": "openai", "base_url": url}},
            "models": {"*": "local"},
        }
        topology = Topology(
            settings={"log_level": "info"},
            actor=(
                ChildSpec(name="gate", run="gate", env={"PARLEY_OPTIONS": json.dumps(keys)}),
                ChildSpec(name="llm", run="llm", env={"PARLEY_OPTIONS": json.dumps(gateway)}),
            ),
        )
        ready = {name: asyncio.Event() for name in ("gate", "llm")}

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
                yield supervisor
            finally:
                stopping.set()


Samples = dict[str, list[tuple[float, float]]]


async def llm_rows(calls: int, rounds: int) -> tuple[Samples, dict[str, Any]]:
    """Each path's (first chunk, whole answer) seconds, `calls` a round, alternating rounds;
    then the long answer's figure."""
    measured: dict[str, list[tuple[float, float]]] = {path: [] for path in PATHS}
    with scratch_directory("parley-bench-llm-") as directory:
        server = EmbeddedServer(Path(directory) / "nats", sync_always=True)
        await asyncio.to_thread(server.start)
        nc = await nats.connect(server.url)
        try:
            ns = Namespace("benchllm")
            await provision(nc.jetstream(), ns)
            agent = _Parley(nc, ns)
            await nc.subscribe(ns.chunks(_AGENT), cb=agent.on_chunk)
            await nc.subscribe(ns.deliver(_AGENT), cb=agent.on_delivery)
            async with (
                _provider() as url,
                httpx.AsyncClient(base_url=url + "/", timeout=_TIMEOUT_S) as client,
                _parley(server, nc, ns, url) as supervisor,
            ):
                paths: dict[str, Call] = {"direct": _direct(client), "parley": agent.call}
                for call in paths.values():  # warm up: connections, caches, the first decision
                    await call()
                for turn in range(rounds):
                    for path in PATHS if turn % 2 == 0 else PATHS[::-1]:
                        for _ in range(calls):
                            measured[path].append(await paths[path]())
                long = await long_figure(
                    lambda wait_s: agent.call(wait_s, LONG_MODEL), supervisor.pid("llm")
                )
        finally:
            await nc.close()
            await asyncio.to_thread(server.stop)
    return measured, long


def summarise_llm(samples: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    """Each path's p50 (ms) to the first chunk and to the whole answer, the ratios and the
    verdict against both aims (FAIL when a path has no samples)."""
    rows: dict[str, dict[str, float]] = {}
    for path in PATHS:
        got = samples.get(path, [])
        rows[path] = {
            "calls": len(got),
            "first_p50_ms": percentile_us([f for f, _ in got], 0.5) / 1000 if got else 0.0,
            "whole_p50_ms": percentile_us([w for _, w in got], 0.5) / 1000 if got else 0.0,
        }
    direct, parley = rows["direct"], rows["parley"]
    measured = bool(direct["calls"] and parley["calls"])
    first = parley["first_p50_ms"] / direct["first_p50_ms"] if measured else float("inf")
    whole = parley["whole_p50_ms"] / direct["whole_p50_ms"] if measured else float("inf")
    return {
        **rows,
        "first_parley_to_direct": first,
        "whole_parley_to_direct": whole,
        "first_aim": FIRST_AIM,
        "whole_aim": WHOLE_AIM,
        "pass": measured and first <= FIRST_AIM and whole <= WHOLE_AIM,
    }


def print_llm(summary: dict[str, Any]) -> None:
    print("\nllm: a streamed answer (first chunk at 50 ms, then 100 chunks 5 ms apart), p50")
    print(f"{'path':<10}{'calls':>8}{'first chunk ms':>18}{'whole answer ms':>18}")
    for path in PATHS:
        row = summary[path]
        print(
            f"{path:<10}{row['calls']:>8}{row['first_p50_ms']:>18.1f}{row['whole_p50_ms']:>18.1f}"
        )
    verdict = "PASS" if summary["pass"] else "FAIL"
    print(
        f"parley / direct: first chunk {summary['first_parley_to_direct']:.2f}x "
        f"(aim <= {FIRST_AIM:g}x), whole answer {summary['whole_parley_to_direct']:.2f}x "
        f"(aim <= {WHOLE_AIM:g}x): {verdict}"
    )


def llm_step(args: argparse.Namespace, result: dict[str, Any]) -> tuple[str, Callable[[], None]]:
    """The row as `parley bench` runs it: what it measures with these options, and the run."""

    def run() -> None:
        samples, long = uvloop.run(llm_rows(args.llm_calls, args.rounds))
        result["llm"] = {**summarise_llm(samples), "long": long}
        print_llm(result["llm"])
        print_long(long)

    return f"llm: {args.llm_calls} streamed calls a path a round, {args.rounds} rounds", run
