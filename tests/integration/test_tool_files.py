"""The file executors act on the path the scope check resolved, at the moment they act.

An earlier step (a command of the same session) may have made a path a symlink since the
runtime checked the request: a read or write goes through the check again and acts on the
real path it found inside the scope, and a delete of a symlink removes the link itself,
never the file it names.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.tools import ScopeDenied, ToolInvocation
from actors.tools._files import execute_file_delete, execute_file_read, execute_file_write
from schemas import Capability


def _invocation(workspace: Path, capability: str, **arguments: object) -> ToolInvocation:
    scope = Capability(name=capability, allowed_paths=("inside",))
    return ToolInvocation(
        capability=capability,
        arguments=dict(arguments),
        scope=scope,
        workspace=workspace,
        session_id="s",
        step_id="step",
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "inside").mkdir()
    (tmp_path / "inside" / "kept.txt").write_text("kept")
    (tmp_path / "outside.txt").write_text("secret")
    return tmp_path


async def test_deleting_a_symlink_removes_the_link_and_keeps_its_target(workspace: Path) -> None:
    (workspace / "inside" / "link").symlink_to(workspace / "inside" / "kept.txt")
    done = await execute_file_delete(_invocation(workspace, "File.Delete", path="inside/link"))
    assert done.status == "succeeded", done
    assert not (workspace / "inside" / "link").is_symlink()
    assert (workspace / "inside" / "kept.txt").read_text() == "kept"


async def test_a_path_turned_into_a_symlink_out_of_scope_is_refused_when_acted_on(
    workspace: Path,
) -> None:
    """The runtime's check passed (the file was inside); by the time the executor runs, an
    earlier command made it a symlink to a file outside: nothing is read or written there."""
    swapped = workspace / "inside" / "notes.txt"
    swapped.symlink_to(workspace / "outside.txt")
    with pytest.raises(ScopeDenied):
        await execute_file_read(_invocation(workspace, "File.Read", path="inside/notes.txt"))
    with pytest.raises(ScopeDenied):
        await execute_file_write(
            _invocation(workspace, "File.Write", path="inside/notes.txt", content="overwritten")
        )
    assert (workspace / "outside.txt").read_text() == "secret"
