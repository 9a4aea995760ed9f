"""Artifacts on a real nats-server: Workspace.Upload into the namespace's object store, URIs
whose digest and size every read checks, and outputs too large for a message stored whole.

Checkpoints and the patch preview are in tests/integration/test_tool_checkpoints.py; who may
read the store, in tests/security/test_artifact_grants.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from actors.tools import (
    ArtifactCorrupt,
    ArtifactNotFound,
    ArtifactStore,
    ArtifactStoreError,
    ArtifactUri,
    BadArtifactUri,
    ScopeDenied,
    StepRecords,
    ToolInvocation,
    ToolOutcome,
    execute_workspace_upload,
)
from bus import Quotas, provision
from schemas import Capability, Namespace


def _upload(
    store: ArtifactStore, workspace: Path, path: str, limit: int | None = None
) -> ToolInvocation:
    return ToolInvocation(
        capability="Workspace.Upload",
        arguments={"path": path},
        scope=Capability(name="Workspace.Upload", max_file_size_bytes=limit),
        workspace=workspace,
        session_id="session-a",
        step_id="step-1",
        artifacts=store,
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspaces" / "session-a"
    path.mkdir(parents=True)
    return path


@pytest.fixture
def store(nc: NATS, namespace: Namespace) -> ArtifactStore:
    return ArtifactStore(nc.jetstream(), namespace, "demo")


async def test_an_upload_within_its_limit_is_stored_under_a_uri_that_names_it(
    store: ArtifactStore, workspace: Path, nc: NATS, namespace: Namespace
) -> None:
    content = os.urandom(300 * 1024)  # three chunks
    (workspace / "report.bin").write_bytes(content)
    outcome = await execute_workspace_upload(_upload(store, workspace, "report.bin", 400_000))
    assert outcome.status == "succeeded", outcome.error_message
    (text,) = outcome.artifact_uris
    uri = ArtifactUri.parse(text)
    assert (uri.tenant, uri.session, uri.size, uri.name) == (
        "demo",
        "session-a",
        len(content),
        "report.bin",
    )
    assert uri.sha256 == hashlib.sha256(content).hexdigest()
    assert await store.get(uri) == content
    assert await store.list("session-a") == [uri]
    assert await store.list("session-b") == []
    # A NATS Object Store like any other: nats-py's own reader gets the same bytes.
    native = await nc.jetstream().object_store(namespace.bucket("artifacts"))
    assert (await native.get(uri.key)).data == content


async def test_an_upload_over_max_file_size_bytes_is_refused_and_nothing_stored(
    store: ArtifactStore, workspace: Path
) -> None:
    (workspace / "big.txt").write_bytes(b"x" * 1001)
    with pytest.raises(ScopeDenied) as refused:
        await execute_workspace_upload(_upload(store, workspace, "big.txt", 1000))
    assert refused.value.rule == "max_file_size_bytes"
    assert await store.list("session-a") == []


@pytest.mark.parametrize("kind", ["symlink", "hard_link", "fifo"])
async def test_an_upload_of_a_link_or_a_fifo_is_refused(
    store: ArtifactStore, workspace: Path, tmp_path: Path, kind: str
) -> None:
    """An earlier command may have left any of these where a file was checked: each could
    lead outside the workspace (a link) or hang the runtime (a FIFO's open)."""
    secret = tmp_path / "outside.txt"
    secret.write_text("not the agent's\n")
    target = workspace / "leak.txt"
    if kind == "symlink":
        target.symlink_to(secret)
    elif kind == "hard_link":
        os.link(secret, target)
    else:
        os.mkfifo(target)
    with pytest.raises(ScopeDenied) as refused:
        await execute_workspace_upload(_upload(store, workspace, "leak.txt"))
    assert refused.value.rule == {"symlink": "symlink", "hard_link": "hard_link"}.get(
        kind, "regular_file"
    )
    assert await store.list("session-a") == []


async def test_a_read_refuses_stored_bytes_that_are_not_what_the_uri_names(
    store: ArtifactStore, nc: NATS, namespace: Namespace
) -> None:
    """Whoever rewrites an object's metadata to point at other chunks (with the same claimed
    digest and size) is caught by the digest of what was read."""
    uri = ArtifactUri.parse(
        await store.put_bytes("session-a", b"the real output", name="o.txt", step_id="s")
    )
    js = nc.jetstream()
    bucket = namespace.bucket("artifacts")
    forged = b"a forged output"  # same length: only the digest tells them apart
    await js.publish(f"$O.{bucket}.C.forged", forged)
    key = base64.urlsafe_b64encode(uri.key.encode()).decode()
    meta = json.loads(
        (await js.get_msg(f"OBJ_{bucket}", subject=f"$O.{bucket}.M.{key}")).data or b""
    )
    meta["nuid"] = "forged"
    await js.publish(
        f"$O.{bucket}.M.{key}", json.dumps(meta).encode(), headers={"Nats-Rollup": "sub"}
    )
    with pytest.raises(ArtifactCorrupt):
        await store.get(uri)


@pytest.mark.parametrize(
    "text",
    [
        "parley-artifact://demo/s1/abc?size=3",  # not a sha256
        "https://demo/s1/" + "0" * 64 + "?size=3",
        "parley-artifact://demo/s1/" + "0" * 64,  # no size
        "parley-artifact://demo/../" + "0" * 64 + "?size=3",
        "parley-artifact://demo/s1/" + "0" * 64 + "?size=3&extra=1",
    ],
)
def test_a_malformed_uri_is_refused(text: str) -> None:
    with pytest.raises(BadArtifactUri):
        ArtifactUri.parse(text)


def test_a_uri_reads_back_as_written() -> None:
    uri = ArtifactUri("demo", "s1", "ab" * 32, 12, "pytest output & more.txt")
    assert ArtifactUri.parse(str(uri)) == uri


async def test_an_output_too_large_for_a_message_is_stored_whole_with_its_start_inline(
    store: ArtifactStore, workspace: Path
) -> None:
    max_payload = 64 * 1024
    output = "".join(f"line {n}: \x1b[31mred\x1b[0m\n" for n in range(20_000))  # escapes grow
    invocation = ToolInvocation(
        capability="File.Read",
        arguments={"path": "log.txt"},
        scope=Capability(name="File.Read"),
        workspace=workspace,
        session_id="session-a",
        step_id="step-2",
    )
    outcome = ToolOutcome(status="succeeded", output_text=output)
    result = await StepRecords(store, max_payload).after(invocation, outcome)
    (text,) = result.artifact_uris
    assert result.details["output_artifact"] == text
    assert len(json.dumps(result.output_text).encode()) <= max_payload // 4
    head, _, note = result.output_text.rpartition("\n")
    assert output.startswith(head) and len(head) > 1000
    assert text in note
    assert (await store.get(ArtifactUri.parse(text))).decode() == output
    small = ToolOutcome(status="succeeded", output_text="short")
    assert await StepRecords(store, max_payload).after(invocation, small) == small


async def test_a_file_name_no_uri_may_hold_is_stored_under_a_printable_label(
    store: ArtifactStore, workspace: Path
) -> None:
    (workspace / "a\nb.txt").write_text("named oddly\n")
    outcome = await execute_workspace_upload(_upload(store, workspace, "a\nb.txt"))
    assert outcome.status == "succeeded", outcome.error_message
    (text,) = outcome.artifact_uris
    assert ArtifactUri.parse(text).name == "a?b.txt"


async def test_a_full_store_refuses_an_artifact_and_keeps_none_of_its_chunks(
    nc: NATS, workspace: Path
) -> None:
    """The store is bounded: past its quota a write is refused, the chunks it published are
    deleted again, and a step's too large output is cut to what fits a message instead."""
    ns = Namespace(f"t{os.urandom(6).hex()}")
    await provision(nc.jetstream(), ns, quotas=Quotas(bucket_bytes={"artifacts": 1024 * 1024}))
    store = ArtifactStore(nc.jetstream(), ns, "demo")
    stream = f"OBJ_{ns.bucket('artifacts')}"
    with pytest.raises(ArtifactStoreError):
        await store.put_bytes("session-a", os.urandom(1536 * 1024), name="big", step_id="1")
    assert (await nc.jetstream().stream_info(stream)).state.messages == 0

    invocation = ToolInvocation(
        capability="File.Read",
        arguments={"path": "x"},
        scope=Capability(name="File.Read"),
        workspace=workspace,
        session_id="session-a",
        step_id="2",
    )
    output = "z" * (1536 * 1024)
    result = await StepRecords(store, 1024 * 1024).after(
        invocation, ToolOutcome(status="succeeded", output_text=output)
    )
    assert result.truncated and result.artifact_uris == ()
    assert "output_artifact_error" in result.details
    assert output.startswith(result.output_text) and len(result.output_text) <= 256 * 1024
    assert (await nc.jetstream().stream_info(stream)).state.messages == 0


async def test_an_object_whose_chunks_expired_first_reads_as_gone_not_corrupt(
    nc: NATS, namespace: Namespace, store: ArtifactStore
) -> None:
    """The store's age limit drops the oldest messages first, an object's chunks before its
    metadata: for that moment it is expiring, not corrupt (a CI run read it corrupt)."""
    text = await store.put_bytes("s1", os.urandom(300 * 1024), name="big", step_id="1")
    js = nc.jetstream()
    stream = f"OBJ_{namespace.bucket('artifacts')}"
    await js.delete_msg(stream, 1)  # the first chunk, as the age limit would take it
    with pytest.raises(ArtifactNotFound, match="expired"):
        await store.get(ArtifactUri.parse(text))
