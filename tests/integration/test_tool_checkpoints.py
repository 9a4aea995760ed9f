"""Checkpoints after each step that changed a session's workspace, and its patch preview.

Steps run through the real executors (File.Write, File.Delete) and, for a command-like change,
a change made outside any executor followed by a Git.Commit step's checkpoint; each
checkpoint's diff is stored in the namespace's object store on a real nats-server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from actors.tools import (
    ArtifactStore,
    ArtifactUri,
    StepRecords,
    ToolInvocation,
    ToolOutcome,
    patch_preview,
    workspace_name,
)
from actors.tools._checkpoints import shadow_repository
from actors.tools._files import execute_file_delete, execute_file_write
from schemas import Capability, Namespace


@pytest.fixture
def workspaces(tmp_path: Path) -> Path:
    root = tmp_path / "workspaces"
    (root / "session-a").mkdir(parents=True)
    (root / "session-a" / "kept.txt").write_text("already here\n")
    return root


@pytest.fixture
def steps(nc: NATS, namespace: Namespace) -> StepRecords:
    return StepRecords(ArtifactStore(nc.jetstream(), namespace, "demo"), 1024 * 1024)


def _invocation(workspaces: Path, capability: str, step: str, **arguments: str) -> ToolInvocation:
    return ToolInvocation(
        capability=capability,
        arguments=arguments,
        scope=Capability(name=capability, allowed_paths=(".",)),
        workspace=workspaces / "session-a",
        session_id="session-a",
        step_id=step,
    )


async def _step(steps: StepRecords, invocation: ToolInvocation) -> ToolOutcome:
    executors = {"File.Write": execute_file_write, "File.Delete": execute_file_delete}
    base_error = await steps.before(invocation)
    executor = executors.get(invocation.capability)
    outcome = await executor(invocation) if executor else ToolOutcome(status="succeeded")
    return await steps.after(invocation, outcome, base_error)


async def test_each_changing_step_has_a_checkpoint_with_its_diff_and_the_preview_sums_them(
    steps: StepRecords, workspaces: Path, nc: NATS, namespace: Namespace
) -> None:
    store = ArtifactStore(nc.jetstream(), namespace, "demo")
    wrote = await _step(
        steps, _invocation(workspaces, "File.Write", "s1", path="a.txt", content="one\ntwo\n")
    )
    diff_uri = wrote.details["checkpoint_diff"]
    assert diff_uri in wrote.artifact_uris
    first = (await store.get(ArtifactUri.parse(diff_uri))).decode()
    assert "+++ b/a.txt" in first and "+two" in first and "kept.txt" not in first

    deleted = await _step(steps, _invocation(workspaces, "File.Delete", "s2", path="kept.txt"))
    second = (await store.get(ArtifactUri.parse(deleted.details["checkpoint_diff"]))).decode()
    assert "deleted file mode" in second and "-already here" in second and "a.txt" not in second

    # A command's change (made here by hand, as a command would), checkpointed after its step;
    # a repository inside the workspace is recorded as its files, not as a submodule link.
    project = workspaces / "session-a" / "project"
    (project / ".git").mkdir(parents=True)
    (project / ".git" / "config").write_text("[core]\n\tfsmonitor = /bin/false\n")
    (project / "src.py").write_text("print('hi')\n")
    committed = await _step(steps, _invocation(workspaces, "Git.Commit", "s3"))
    third = (await store.get(ArtifactUri.parse(committed.details["checkpoint_diff"]))).decode()
    assert "+++ b/project/src.py" in third and ".git/" not in third

    read = await _step(
        steps, _invocation(workspaces, "File.Write", "s4", path="a.txt", content="one\ntwo\n")
    )
    assert "checkpoint" not in read.details  # nothing changed: no checkpoint
    preview = patch_preview(workspaces, "session-a")
    assert "+++ b/a.txt" in preview and "-already here" in preview
    assert "+++ b/project/src.py" in preview
    assert patch_preview(workspaces, "session-b") == ""
    assert shadow_repository(workspaces / "session-a").parent == workspaces / ".checkpoints"


async def test_the_preview_of_a_session_whose_id_is_no_safe_name_finds_its_workspace(
    steps: StepRecords, workspaces: Path
) -> None:
    session = "alice's task #1"  # the runtime names its directory by a digest
    workspace = workspaces / workspace_name(session)
    workspace.mkdir()
    asked = _invocation(workspaces, "File.Write", "s1", path="a.txt", content="one\n")
    wrote = await _step(steps, dataclasses.replace(asked, workspace=workspace, session_id=session))
    assert "checkpoint_diff" in wrote.details
    assert "+++ b/a.txt" in patch_preview(workspaces, session)


async def test_a_snapshot_never_follows_a_link_out_of_the_workspace(
    steps: StepRecords, workspaces: Path, tmp_path: Path
) -> None:
    """A symlink is recorded as its target's name and a hard link is left out: neither copies
    a file from outside into the diff a person (or a store reader) is shown."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET\n")
    await steps.before(_invocation(workspaces, "Shell.Exec", "s0"))
    (workspaces / "session-a" / "sym").symlink_to(secret)
    (workspaces / "session-a" / "linkdir").symlink_to(tmp_path)
    os.link(secret, workspaces / "session-a" / "hard")
    outcome = await steps.after(
        _invocation(workspaces, "Shell.Exec", "s1"), ToolOutcome(status="succeeded")
    )
    preview = patch_preview(workspaces, "session-a")
    assert "TOP SECRET" not in preview
    assert f"+{secret}" in preview and "b/sym" in preview and "b/linkdir" in preview
    assert "b/hard" not in preview
    assert "checkpoint" in outcome.details


async def test_steps_of_one_session_at_once_each_get_their_checkpoint(
    steps: StepRecords, workspaces: Path
) -> None:
    """Replicas and concurrent deliveries may end steps of one session together: snapshots are
    taken one at a time, so none fails and the preview has every change."""
    invocations = [
        _invocation(workspaces, "File.Write", f"c{n}", path=f"f{n}.txt", content=f"{n}\n")
        for n in range(8)
    ]
    outcomes = await asyncio.gather(*(_step(steps, i) for i in invocations))
    assert [o.details.get("checkpoint_error") for o in outcomes] == [None] * 8
    preview = patch_preview(workspaces, "session-a")
    assert all(f"+++ b/f{n}.txt" in preview for n in range(8))


def _repository_without_base(workspace: Path) -> None:
    """The state the first snapshot is in between creating the repository and its commit."""
    repository = shadow_repository(workspace)
    repository.parent.mkdir(parents=True)
    subprocess.run(
        ["git", "init", "--quiet", "--bare", str(repository)],  # noqa: S607
        check=True,
        capture_output=True,
    )


async def test_a_step_that_finds_the_base_still_being_made_waits_for_it(
    steps: StepRecords, workspaces: Path
) -> None:
    """The first snapshot creates the shadow repository before it commits the base: a step
    that starts in between must not take the repository for the base, or the base would record
    that step's change as already there and no diff would show it."""
    _repository_without_base(workspaces / "session-a")
    wrote = await _step(
        steps, _invocation(workspaces, "File.Write", "s1", path="new.txt", content="new\n")
    )
    assert "checkpoint_diff" in wrote.details
    assert "+++ b/new.txt" in patch_preview(workspaces, "session-a")


async def test_a_step_whose_base_snapshot_failed_says_its_changes_are_in_no_diff(
    steps: StepRecords, workspaces: Path
) -> None:
    """A base snapshot that cannot be made does not stop the step, but its result says so: its
    own snapshot becomes the base, so its changes are in no diff (they used to go unsaid).
    The next step's diff is whole again."""
    workspace = workspaces / "session-a"
    in_the_way = shadow_repository(workspace).with_suffix(".git.lock")
    in_the_way.mkdir(parents=True)  # the snapshot lock cannot be opened: the base fails
    first = _invocation(workspaces, "File.Write", "s1", path="one.txt", content="1\n")
    base_error = await steps.before(first)
    in_the_way.rmdir()  # a passing trouble: the step's own snapshot can be made
    wrote = await steps.after(first, await execute_file_write(first), base_error)
    error = wrote.details.get("checkpoint_error")
    assert isinstance(error, str) and "no base snapshot" in error and "no diff" in error, error
    assert "checkpoint_diff" not in wrote.details
    second = await _step(
        steps, _invocation(workspaces, "File.Write", "s2", path="two.txt", content="2\n")
    )
    assert second.details.get("checkpoint_error") is None
    assert "+++ b/two.txt" in patch_preview(workspaces, "session-a")
