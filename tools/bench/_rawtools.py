"""The tools row's references: the same 4 KiB File.Read answered with raw nats-py alone.

Each runs as a process of its own (`run_reference`), as the tool runtime does, and prints
`ready` once it listens. Both decode the `tool_request` envelope, read the file from the
session's workspace and answer an encoded `tool_result` carrying its text, so the envelope
work matches Parley's; neither checks a scope, a bundle or a path.

- `raw`: core NATS request/reply. Nothing is stored: a request lost with the responder is
  lost, and a request repeated runs again. The issue's reference for the 2x aim.
- `guarded`: what Parley's path stores, in its order, done with nats-py alone in one process.
  The client publishes the request into the submit stream (a stored, acknowledged publish);
  the responder pulls it one at a time and then, as the gate does for the request, reads the
  id's claim (absent), claims it create-only, and stores the trace record, the position, the
  delivery to the tool runtime and the decision together; as the tool runtime does, creates
  the step's run mark create-only, reads the file, stores the result over the mark
  (compare-and-set on the mark's revision) and submits the result; as the gate does for the
  result, reads and claims its id, then stores its trace record, position, delivery to the
  agent and decision together; then acks the request. The client sees the delivery on its
  subject. Fourteen stores in eight rounds (the client's publish the first), after two reads;
  Parley's gate also stores its in-flight counts and an answer record, in rounds counted here.
  It runs without Parley's two extra process hops (the delivery to the runtime and the result's
  submission are each pulled by another process in Parley) and without its checks: the
  floor those durable, at-most-once steps set for any client.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import msgspec
import nats
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from schemas import Namespace, ToolRequest, ToolResult, decode_envelope, derive_id, encode, utc_now

__all__ = ("AGENT", "REFERENCES", "STEP", "guarded_step", "raw_subject", "run_reference")

AGENT = "bench"
"""The agent whose requests every path answers (its delivery subject is the answer's)."""
STEP = "Bench-Step"
"""The header naming the step an answer is for, on the guarded path's deliveries."""
REFERENCES = ("raw", "guarded")


def raw_subject(ns: Namespace) -> str:
    """The raw responder's subject: outside every stream, so no stream answers it first."""
    return f"bench.rawtools.{ns.root}"


_CREATE_ONLY = {"Nats-Expected-Last-Subject-Sequence": "0"}
_FETCH_TIMEOUT_S = 5.0


def answer(request: ToolRequest, workspaces: Path) -> ToolResult:
    """Read the requested file from the session's workspace, as File.Read returns it."""
    path = workspaces / request.session_id / str(request.arguments["path"])
    text = path.read_bytes().decode("utf-8", errors="replace")
    return ToolResult(
        id=derive_id(request.id, "tool_result"),
        created_at=utc_now(),
        tool_name=request.tool_name,
        session_id=request.session_id,
        task_id=request.task_id,
        step_id=request.step_id,
        status="succeeded",
        output_text=text,
        details={"bytes": len(text)},
    )


def _request_of(data: bytes) -> ToolRequest:
    envelope = decode_envelope(data)
    if not isinstance(envelope, ToolRequest):
        raise TypeError(f"the reference was sent a {type(envelope).__name__}")
    return envelope


async def _raw(url: str, ns: Namespace, workspaces: Path) -> None:
    nc = await nats.connect(url)

    async def respond(msg: Msg) -> None:
        await msg.respond(encode(answer(_request_of(msg.data), workspaces)))

    await nc.subscribe(raw_subject(ns), cb=respond)
    await nc.flush()
    print("ready", flush=True)
    await asyncio.Event().wait()  # answers until terminated


async def _absent(js: JetStreamContext, bucket: str, key: str) -> None:
    """Read a key that is not there, as the gate's look-up of a fresh id does."""
    try:
        await js.get_last_msg(f"KV_{bucket}", f"$KV.{bucket}.{key}")
    except NotFoundError:
        return
    raise RuntimeError(f"{key} exists: the guarded path's ids are fresh")


async def _gate_stores(
    js: JetStreamContext, ns: Namespace, envelope_id: str, deliver: str, data: bytes, step: str
) -> None:
    """The gate's stores for one envelope, in its order: look-up, claim, then the rest."""
    ids, traces = ns.bucket("idempotency"), ns.bucket("traces")
    await _absent(js, ids, f"id.{envelope_id}")
    await js.publish(f"$KV.{ids}.id.{envelope_id}", b"claim", headers=_CREATE_ONLY)
    await asyncio.gather(
        js.publish(f"$KV.{traces}.trace.{envelope_id}", b"trace"),
        js.publish(f"$KV.{traces}.pos.{envelope_id}", b"position"),
        js.publish(deliver, data, headers={"Nats-Msg-Id": f"{envelope_id}:d", STEP: step}),
        js.publish(ns.decisions("bench"), b"decision"),
    )


async def guarded_step(js: JetStreamContext, ns: Namespace, data: bytes, workspaces: Path) -> None:
    """One request's stores, read and answer on the guarded path, in Parley's order."""
    request = _request_of(data)
    await _gate_stores(js, ns, request.id, ns.deliver("tools"), data, request.step_id)
    runs = ns.bucket("tool_runs")
    run = f"$KV.{runs}.run." + hashlib.sha256(request.step_id.encode()).hexdigest()[:48]
    mark = await js.publish(run, b"started", headers=_CREATE_ONLY)
    result = encode(answer(request, workspaces))
    last = {"Nats-Expected-Last-Subject-Sequence": str(mark.seq)}
    await js.publish(run, msgspec.msgpack.encode({"result": result}), headers=last)
    await js.publish(ns.submit("tools"), result)
    result_id = derive_id(request.id, "tool_result")
    await _gate_stores(js, ns, result_id, ns.deliver(AGENT), result, request.step_id)


async def _guarded(url: str, ns: Namespace, workspaces: Path) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    sub = await js.pull_subscribe(ns.submit(AGENT), durable="rawtools", stream=ns.stream("submit"))
    print("ready", flush=True)
    while True:
        try:
            messages = await sub.fetch(1, timeout=_FETCH_TIMEOUT_S)
        except TimeoutError:
            continue
        for msg in messages:
            await guarded_step(js, ns, msg.data, workspaces)
            await msg.ack()


async def run_reference(path: str, url: str, root: str, workspaces: str) -> None:
    """Answer File.Read requests for ever, as reference `path` ("raw" or "guarded")."""
    ns, directory = Namespace(root), Path(workspaces)
    await (_raw if path == "raw" else _guarded)(url, ns, directory)
