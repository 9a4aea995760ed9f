"""The tool runtime as a real process (`parley run tools`) stores artifacts and checkpoints.

Requests are delivered on the runtime's subject as the gate delivers them (with the sender's,
the session's and its person's headers); its results are read from its submissions. A
File.Write step's result names its checkpoint's diff, a Workspace.Upload step's names the
uploaded file, a File.Read of an output too large for a message carries its first part and the
whole as an artifact; each URI reads back from the store with its digest checked, and the patch
preview shows the session's change.

Each person and each agent has a share of the store: past it an upload fails and a diff is not
kept, for that person or agent only, while others' steps store on.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
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


@asynccontextmanager
async def running_runtime(
    nc: NATS, namespace: Namespace, tmp_path: Path, ready_line: str = READY, **settings: str
) -> AsyncIterator[tuple[ProcessOutput, Path]]:
    """`parley run tools` with a bundle letting agent `probe` read, write and upload, and
    `settings` (`PARLEY_<NAME>`) besides the test's, once it logged `ready_line`."""
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
        **settings,
    )
    env["NATS_URL"] = nc.connected_url.geturl() if nc.connected_url else ""
    process = start_actor("tools", "tools", env)
    try:
        await process.wait_line(ready_line)
        yield process, workspaces
    finally:
        process.close()


@pytest.fixture
async def runtime(
    nc: NATS, namespace: Namespace, tmp_path: Path
) -> AsyncIterator[tuple[ProcessOutput, Path]]:
    async with running_runtime(nc, namespace, tmp_path) as started:
        yield started


class Steps:
    """Delivers requests to the runtime as the gate would, and reads its results."""

    def __init__(self, nc: NATS, ns: Namespace) -> None:
        self.js, self.ns = nc.jetstream(), ns

    async def open(self) -> Steps:
        self._results = await self.js.pull_subscribe(
            self.ns.submit("tools"), durable="results", stream=self.ns.stream("submit")
        )
        return self

    async def run(
        self,
        step: str,
        tool: str,
        *,
        session: str = "session-e2e",
        person: str = "cli",
        **arguments: object,
    ) -> ToolResult:
        """Step `step` of agent `probe` in `session`, whose trace works for `person`."""
        request = ToolRequest(
            id=new_id(),
            created_at=utc_now(),
            tool_name=tool,
            arguments=dict(arguments),
            session_id=session,
            task_id="task-1",
            step_id=step,
        )
        headers = {MSG_ID: request.id, SENDER: "probe", SESSION: session, ORIGIN: person}
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


async def test_one_agent_fills_its_own_and_its_persons_share_of_the_store_never_the_store(
    nc: NATS, namespace: Namespace, tmp_path: Path
) -> None:
    """The attack: an agent's steps store large files (uploads here; its diffs and outputs
    alike) until the store every person shares is full. Each person's share is 1 MiB and the
    agent's 1.5 MiB, so a person's second upload of 760 KiB is refused, another person's
    first goes on, and a third person's is refused by the agent's share."""
    shares = {"artifact_bytes_per_person": 1 << 20, "artifact_bytes_per_agent": 3 << 19}
    async with running_runtime(nc, namespace, tmp_path, quotas=json.dumps(shares)) as started:
        _, workspaces = started
        steps = await Steps(nc, namespace).open()

        def upload(step: str, session: str, person: str) -> tuple[str, str]:
            (workspaces / session).mkdir(exist_ok=True, mode=0o700)
            (workspaces / session / f"{step}.bin").write_bytes(os.urandom(760 * 1024))
            return session, person

        session, person = upload("a1", "s-alice", "person-alice")
        first = await steps.run(
            "a1", "Workspace.Upload", session=session, person=person, path="a1.bin"
        )
        assert first.status == "succeeded", first.error
        upload("a2", "s-alice", "person-alice")
        second = await steps.run(
            "a2", "Workspace.Upload", session=session, person=person, path="a2.bin"
        )
        assert second.status == "failed" and second.error is not None
        assert second.error.code == "WORKSPACE_UPLOAD_FAILED"
        assert "person person-alice" in second.error.message
        assert "artifact_bytes_per_person" in second.error.message
        # The same content again is the object already stored: neither refused nor charged.
        again = await steps.run(
            "a1b", "Workspace.Upload", session=session, person=person, path="a1.bin"
        )
        assert again.status == "succeeded" and again.artifact_uris == first.artifact_uris

        session, person = upload("b1", "s-bob", "person-bob")
        bobs = await steps.run(
            "b1", "Workspace.Upload", session=session, person=person, path="b1.bin"
        )
        assert bobs.status == "succeeded", bobs.error

        session, person = upload("c1", "s-carol", "person-carol")
        carols = await steps.run(
            "c1", "Workspace.Upload", session=session, person=person, path="c1.bin"
        )
        assert carols.status == "failed" and carols.error is not None
        assert "agent probe" in carols.error.message, carols.error
        assert "artifact_bytes_per_agent" in carols.error.message

        # A change whose diff passes the share still ran: the step says why no diff was kept.
        wrote = await steps.run(
            "c2", "File.Write", session=session, person=person, path="big.txt",
            content=os.urandom(300 * 1024).hex()[: 40 * 1024],
        )  # fmt: skip
        assert wrote.status == "succeeded", wrote.error
        assert "artifact_bytes_per_agent" in wrote.details["checkpoint_error"]
        assert (workspaces / "s-carol" / "big.txt").exists()


async def test_the_runtime_refuses_to_start_on_a_store_that_keeps_objects_for_ever(
    nc: NATS, namespace: Namespace, tmp_path: Path
) -> None:
    """An earlier release's store had no age limit: counting shares on it would free bytes
    the store still holds, so a runtime that does not provision (least privilege) asks for
    `parley provision` instead."""
    js = nc.jetstream()
    stream = f"OBJ_{namespace.bucket('artifacts')}"
    config = (await js.stream_info(stream)).config
    config.max_age = 0
    await js.update_stream(config)
    async with running_runtime(
        nc, namespace, tmp_path, ready_line="keeps objects for ever", provision="false"
    ) as started:
        process, _ = started
        assert await process.wait_exit() != 0
        assert any("run `parley provision`" in line for line in process.lines)
