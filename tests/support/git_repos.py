"""Real git repositories for the Git tools' tests: a work tree with one commit, bare remotes.

The test's own git commands run with no global or system config, so the machine's settings
cannot change what the tests see; they are the test's hands, not the code under test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from actors.tools import ToolInvocation
from schemas import Capability

__all__ = ("Workspace", "git", "invocation", "make_workspace")

GIT = shutil.which("git") or "git"


def git(cwd: Path, *arguments: str) -> str:
    """Run git as the test (not as the executor) and return its output; fail loudly."""
    environment = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd),
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    done = subprocess.run(
        [GIT, "-c", "user.name=Test", "-c", "user.email=test@example.invalid", *arguments],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"git {' '.join(arguments)}: {done.stderr}"
    return done.stdout


@dataclass(frozen=True)
class Workspace:
    """A session's workspace holding `project` (a repository) and `remotes/allowed.git`
    (its `origin`), and, outside the workspace, `elsewhere/other.git` (its remote `other`)."""

    root: Path
    project: Path
    allowed_remote: Path
    other_remote: Path


def make_workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "workspace"
    project = root / "project"
    allowed_remote = root / "remotes" / "allowed.git"
    other_remote = tmp_path / "elsewhere" / "other.git"
    for bare in (allowed_remote, other_remote):
        bare.mkdir(parents=True)
        git(bare, "init", "-q", "--bare", "-b", "main")
    project.mkdir(parents=True)
    git(project, "init", "-q", "-b", "main")
    (project / "a.txt").write_text("old line\n")
    (project / "b.txt").write_text("b\n")
    git(project, "add", "a.txt", "b.txt")
    git(project, "commit", "-q", "-m", "The first commit")
    git(project, "remote", "add", "origin", str(allowed_remote))
    git(project, "remote", "add", "other", str(other_remote))
    return Workspace(root, project, allowed_remote, other_remote)


def invocation(
    workspace: Workspace,
    capability: str,
    arguments: dict[str, object],
    *,
    allowed_paths: tuple[str, ...] = ("project", "remotes"),
    allowed_domains: tuple[str, ...] = (),
    max_output_bytes: int | None = None,
) -> ToolInvocation:
    return ToolInvocation(
        capability=capability,
        arguments={"repo": "project", **arguments},
        scope=Capability(
            name=capability,
            allowed_paths=allowed_paths,
            allowed_domains=allowed_domains,
            max_output_bytes=max_output_bytes,
        ),
        workspace=workspace.root,
        session_id="session-git",
        step_id="step-1",
        timeout_s=30.0,
    )
