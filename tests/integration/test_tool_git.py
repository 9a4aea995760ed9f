"""Git.Status, Git.Diff, Git.Commit and Git.Push on real repositories in a workspace.

Each test makes its own repository with one commit, a bare remote inside the workspace that
the scope allows (`origin`) and one outside it (`other`). Hostile repositories are in
tests/security/test_tool_network_git_attacks.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.tools import (
    ScopeDenied,
    execute_git_commit,
    execute_git_diff,
    execute_git_push,
    execute_git_status,
)
from schemas import ErrorCode
from tests.support.git_repos import Workspace, git, invocation, make_workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return make_workspace(tmp_path)


async def test_status_lists_changed_and_untracked_files(workspace: Workspace) -> None:
    (workspace.project / "a.txt").write_text("new line\n")
    (workspace.project / "new.txt").write_text("fresh\n")
    outcome = await execute_git_status(invocation(workspace, "Git.Status", {}))
    assert outcome.status == "succeeded", outcome.error_message
    assert outcome.output_text.splitlines() == ["## main", " M a.txt", "?? new.txt"]
    assert outcome.provenance is not None
    assert outcome.provenance.source == "Git.Status"
    assert outcome.provenance.locator == str(workspace.project.resolve())


async def test_diff_shows_the_work_tree_or_the_staged_changes(workspace: Workspace) -> None:
    (workspace.project / "a.txt").write_text("new line\n")
    (workspace.project / "b.txt").write_text("b staged\n")
    git(workspace.project, "add", "b.txt")
    unstaged = await execute_git_diff(invocation(workspace, "Git.Diff", {}))
    staged = await execute_git_diff(invocation(workspace, "Git.Diff", {"staged": True}))
    assert unstaged.status == staged.status == "succeeded"
    assert "-old line\n+new line" in unstaged.output_text
    assert "b.txt" not in unstaged.output_text
    assert "+b staged" in staged.output_text
    assert "a.txt" not in staged.output_text


async def test_diff_output_is_cut_at_max_output_bytes(workspace: Workspace) -> None:
    (workspace.project / "a.txt").write_text("changed\n" * 5000)
    outcome = await execute_git_diff(invocation(workspace, "Git.Diff", {}, max_output_bytes=100))
    assert outcome.status == "succeeded"
    assert outcome.truncated
    assert len(outcome.output_text.encode()) == 100
    assert outcome.output_text.startswith("diff --git a/a.txt b/a.txt")


async def test_commit_of_given_paths_commits_only_those_as_the_agent(
    workspace: Workspace,
) -> None:
    (workspace.project / "a.txt").write_text("new line\n")
    (workspace.project / "b.txt").write_text("b changed\n")
    (workspace.project / "c.txt").write_text("a new file\n")
    git(workspace.project, "add", "b.txt")  # staged before: still not part of this commit
    outcome = await execute_git_commit(
        invocation(
            workspace, "Git.Commit", {"message": "Change a and add c", "paths": ["a.txt", "c.txt"]}
        )
    )
    assert outcome.status == "succeeded", outcome.error_message
    head = git(workspace.project, "rev-parse", "HEAD").strip()
    assert outcome.details["commit"] == head
    shown = git(workspace.project, "show", "--name-only", "--format=%an <%ae>|%cn|%s", "HEAD")
    assert shown.split() == [
        "Parley",
        "agent",
        "<agent@parley.invalid>|Parley",
        "agent|Change",
        "a",
        "and",
        "add",
        "c",
        "a.txt",
        "c.txt",
    ]
    assert git(workspace.project, "status", "--porcelain").splitlines() == ["M  b.txt"]


async def test_commit_with_nothing_to_commit_fails(workspace: Workspace) -> None:
    outcome = await execute_git_commit(invocation(workspace, "Git.Commit", {"message": "Empty"}))
    assert outcome.status == "failed"
    assert outcome.error_code == ErrorCode.TOOL_EXECUTION_FAILED
    assert "nothing to commit" in (outcome.error_message or "")


async def test_push_to_the_allowed_remote_updates_its_branch(workspace: Workspace) -> None:
    (workspace.project / "a.txt").write_text("pushed\n")
    git(workspace.project, "commit", "-q", "-am", "To push")
    outcome = await execute_git_push(invocation(workspace, "Git.Push", {"branch": "main"}))
    assert outcome.status == "succeeded", outcome.error_message
    assert git(workspace.allowed_remote, "rev-parse", "main") == git(
        workspace.project, "rev-parse", "HEAD"
    )
    assert outcome.details["remote_urls"] == [str(workspace.allowed_remote)]


async def test_push_to_a_remote_outside_allowed_paths_is_refused_and_leaves_it_unchanged(
    workspace: Workspace,
) -> None:
    with pytest.raises(ScopeDenied) as denied:
        await execute_git_push(
            invocation(workspace, "Git.Push", {"remote": "other", "branch": "main"})
        )
    assert denied.value.rule == "allowed_domains"
    assert git(workspace.other_remote, "for-each-ref") == ""


async def test_a_push_that_is_not_a_fast_forward_is_rejected_not_forced(
    workspace: Workspace,
) -> None:
    git(workspace.project, "push", "-q", "origin", "main")
    remote_head = git(workspace.allowed_remote, "rev-parse", "main")
    git(workspace.project, "commit", "-q", "--amend", "-m", "Rewritten history")
    outcome = await execute_git_push(invocation(workspace, "Git.Push", {"branch": "main"}))
    assert outcome.status == "failed"
    assert git(workspace.allowed_remote, "rev-parse", "main") == remote_head


async def test_git_works_in_the_workspace_alone_whatever_the_scope_allows(
    workspace: Workspace, tmp_path: Path
) -> None:
    """Git runs contained, seeing the session's workspace only: a repository or a local
    remote an absolute `allowed_paths` entry names outside it is refused, saying why, rather
    than failing inside the sandbox (an internal error, a remote git could not find)."""
    outside = tmp_path / "elsewhere"
    elsewhere = (*("project", "remotes"), str(outside))
    project = tmp_path / "elsewhere" / "project"
    project.mkdir(parents=True)
    git(project, "init", "-q", "-b", "main")
    status = invocation(workspace, "Git.Status", {"repo": str(project)}, allowed_paths=elsewhere)
    refused = await execute_git_status(status)
    assert refused.status == "failed"
    assert "outside the session's workspace" in (refused.error_message or "")
    with pytest.raises(ScopeDenied) as denied:
        await execute_git_push(
            invocation(
                workspace,
                "Git.Push",
                {"remote": "other", "branch": "main"},
                allowed_paths=elsewhere,
            )
        )
    assert denied.value.rule == "allowed_paths"
    assert "outside the session's workspace" in str(denied.value)
    assert git(workspace.other_remote, "for-each-ref") == ""
