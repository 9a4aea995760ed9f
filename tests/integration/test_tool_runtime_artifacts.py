"""The tool runtime as a real process (`parley run tools`) stores artifacts and checkpoints.

Requests are delivered on the runtime's subject as the gate delivers them (with the sender's,
the session's and its person's headers); its results are read from its submissions. A
File.Write step's result names its checkpoint's diff, a Workspace.Upload step's names the
uploaded file, a File.Read of an output too large for a message carries its first part and the
whole as an artifact; each URI reads back from the store with its digest checked, and the patch
preview shows the session's change.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client as NATS

from actors.tools import ArtifactStore, ArtifactUri, patch_preview
from bus import MSG_ID, ORIGIN, SENDER, SESSION
from schemas import (
    Capability,
    Namespace,
    ToolRequest,
    ToolResult,
    decode_envelope,
    encode,
    new_id,
    utc_now,
)
from tests.support.gate import Signer, make_bundle, publish_bundle
from tests.support.processes import READY, ProcessOutput, parley_env, start_actor

MAX_PAYLOAD = 64 * 1024


@pytest.fixture
async def runtime(
    nc: NATS, namespace: Namespace, tmp_path: Path
) -> AsyncIterator[tuple[ProcessOutput, Path]]:
    signer = Signer.create(tmp_path)
    everything = Capability(name="File.Read", allowed_paths=(".",), max_output_bytes=1 << 20)
    writes = Capability(name="File.Write", allowed_paths=(".",))
    uploads = Capability(name="Workspace.Upload", allowed_paths=(".",))
    bundle = make_bundle(
        probe={
            "capabilities": ("File.Write", "File.Read", "Workspace.Upload"),
            "scopes": (everything, writes, uploads),
        }
    )
    await publish_bundle(nc.jetstream(), namespace, signer.sign(bundle))
    workspaces = tmp_path / "workspaces"
    options = {
        "policy_keys": [str(signer.pub_path)],
        "tenant": "test",
        "workspaces": str(workspaces),
    }
    env = parley_env(
        "",
        namespace.root,
        options=msgspec.json.encode(options).decode(),
        max_payload=str(MAX_PAYLOAD),
    )
    env["NATS_URL"] = nc.connected_url.geturl() if nc.connected_url else ""
    process = start_actor("tools", "tools", env)
    try:
        await process.wait_line(READY)
        yield process, workspaces
    finally:
        process.close()


class Steps:
    """Delivers requests to the runtime as the gate would, and reads its results."""

    def __init__(self, nc: NATS, ns: Namespace) -> None:
        self.js, self.ns = nc.jetstream(), ns

    async def open(self) -> Steps:
        self._results = await self.js.pull_subscribe(
            self.ns.submit("tools"), durable="results", stream=self.ns.stream("submit")
        )
        return self

    async def run(self, step: str, tool: str, **arguments: object) -> ToolResult:
        request = ToolRequest(
            id=new_id(),
            created_at=utc_now(),
            tool_name=tool,
            arguments=dict(arguments),
            session_id="session-e2e",
            task_id="task-1",
            step_id=step,
        )
        headers = {MSG_ID: request.id, SENDER: "probe", SESSION: "session-e2e", ORIGIN: "cli"}
        await self.js.publish(self.ns.deliver("tools"), encode(request), headers=headers)
        (msg,) = await self._results.fetch(1, timeout=30)
        await msg.ack()
        result = decode_envelope(msg.data)
        assert isinstance(result, ToolResult) and result.step_id == step
        return result


async def test_the_runtime_names_checkpoints_uploads_and_large_outputs_by_their_uris(
    nc: NATS, namespace: Namespace, runtime: tuple[ProcessOutput, Path]
) -> None:
    _, workspaces = runtime
    steps = await Steps(nc, namespace).open()
    store = ArtifactStore(nc.jetstream(), namespace, "test")
    content = "".join(f"row {n}\n" for n in range(30_000))  # far over a quarter of 64 KiB

    lines = content.splitlines(keepends=True)
    parts = ["".join(lines[n : n + 3000]) for n in range(0, len(lines), 3000)]  # each < 64 KiB
    for n, part in enumerate(parts):
        wrote = await steps.run(f"w{n}", "File.Write", path="out.txt", content=part, append=n > 0)
        assert wrote.status == "succeeded", wrote.error
        diff = (await store.get(ArtifactUri.parse(wrote.details["checkpoint_diff"]))).decode()
        assert "+++ b/out.txt" in diff and f"+{lines[n * 3000]}" in diff
        assert wrote.artifact_uris == (wrote.details["checkpoint_diff"],)

    uploaded = await steps.run("s2", "Workspace.Upload", path="out.txt")
    assert uploaded.status == "succeeded", uploaded.error
    (upload_uri,) = uploaded.artifact_uris
    assert (await store.get(ArtifactUri.parse(upload_uri))).decode() == content

    read = await steps.run("s3", "File.Read", path="out.txt")
    assert read.status == "succeeded", read.error
    assert len(encode(read)) < MAX_PAYLOAD
    (output_uri,) = read.artifact_uris
    assert (await store.get(ArtifactUri.parse(output_uri))).decode() == content
    assert content.startswith((read.output_text or "").rpartition("\n[")[0])

    preview = patch_preview(workspaces, "session-e2e")
    assert "+row 0\n" in preview and "+row 29999\n" in preview
