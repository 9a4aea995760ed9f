"""Attacks on Network.Http and the Git tools: each is refused and reaches nothing.

Network.Http: a redirect from an allowed server to a host the scope does not name, a name
the scope allows that resolves to loopback, an IP literal the scope does not list. The
servers are real (tests/support/http_origin.py) and count every request, so "refused before
it was sent" is a server with no hits.

Git: repositories whose own `.git/config` (which any File.Write into the repository can
change) names a program to run: hooks by `core.hooksPath` or in `.git/hooks`,
`core.fsmonitor`, a clean filter, a local remote's `receivepack` and the remote's own hooks,
an `ext::` remote. Each would create a marker file; the marker never appears. And what no
setting names: an alternates file that lends the repository another's objects, outside the
workspace, which git contained in the sandbox cannot see.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from actors.tools import (
    ScopeDenied,
    ToolInvocation,
    execute_git_commit,
    execute_git_diff,
    execute_git_push,
    execute_git_status,
    execute_http,
)
from actors.tools._git_run import open_repository, run_git
from actors.tools._sandbox import bubblewrap_unusable
from schemas import Capability, ErrorCode
from tests.support.git_repos import Workspace, git, invocation, make_workspace
from tests.support.http_origin import origin


def _http(url: str, *domains: str) -> ToolInvocation:
    return ToolInvocation(
        capability="Network.Http",
        arguments={"url": url},
        scope=Capability(name="Network.Http", allowed_domains=domains),
        workspace=Path("."),
        session_id="session-attack",
        step_id="step-1",
        timeout_s=5.0,
    )


async def test_a_redirect_to_a_host_not_allowed_is_refused_before_it_is_followed() -> None:
    """Both loopback addresses are listed, so only the check of the Location refuses."""
    with origin() as allowed, origin() as elsewhere:
        target = elsewhere.url("/hello", host="localhost")
        with pytest.raises(ScopeDenied) as denied:
            await execute_http(_http(allowed.url(f"/redirect?to={target}"), "127.0.0.1", "::1"))
        assert [hit.path for hit in allowed.seen()] == ["/redirect"]
        assert elsewhere.seen() == []
    assert denied.value.rule == "allowed_domains"
    assert "'localhost' is not in allowed_domains" in str(denied.value)


async def test_an_allowed_name_that_resolves_to_loopback_is_refused() -> None:
    """`localhost` is allowed by name; the addresses it resolves to are not listed."""
    with origin() as server:
        with pytest.raises(ScopeDenied) as denied:
            await execute_http(_http(server.url("/hello", host="localhost"), "localhost"))
        assert server.seen() == []
    assert denied.value.rule == "allowed_domains"
    assert "localhost resolves to" in str(denied.value)
    assert "not a public address" in str(denied.value)


async def test_an_ip_literal_not_listed_is_refused() -> None:
    """Two defences hold here: the literal is not listed, and loopback is not either; the
    request reaches the server only with both gone (the next test isolates the first)."""
    with origin() as server:
        with pytest.raises(ScopeDenied):
            await execute_http(_http(server.url("/hello"), "localhost"))
        assert server.seen() == []


async def test_a_public_ip_literal_of_an_allowed_name_is_refused_unsent() -> None:
    """A public address passes the resolved-address check; only the literal rule refuses it
    (without it the executor would try to connect out, and fail or time out instead)."""
    with pytest.raises(ScopeDenied) as denied:
        await execute_http(_http("http://1.1.1.1:9/", "one.one.one.one"))
    assert "the address '1.1.1.1' is not in allowed_domains" in str(denied.value)


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return make_workspace(tmp_path)


def _marker_command(marker: Path) -> str:
    return f"touch {marker}"


def _hook(directory: Path, name: str, marker: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    hook = directory / name
    hook.write_text(f"#!/bin/sh\n{_marker_command(marker)}\n")
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)


async def test_hooks_of_the_repository_never_run_on_commit(
    workspace: Workspace, tmp_path: Path
) -> None:
    marker = tmp_path / "hooked"
    for name in ("pre-commit", "commit-msg", "post-commit"):
        _hook(workspace.project / ".git" / "hooks", name, marker)
        _hook(workspace.project / "evil-hooks", name, marker)
    git(workspace.project, "config", "core.hooksPath", "evil-hooks")
    (workspace.project / "a.txt").write_text("changed\n")
    outcome = await execute_git_commit(
        invocation(workspace, "Git.Commit", {"message": "Hooked?", "paths": ["a.txt"]})
    )
    assert outcome.status == "succeeded", outcome.error_message
    assert not marker.exists()


async def test_a_fsmonitor_command_never_runs_on_status(
    workspace: Workspace, tmp_path: Path
) -> None:
    marker = tmp_path / "fsmonitor"
    git(workspace.project, "config", "core.fsmonitor", _marker_command(marker))
    outcome = await execute_git_status(invocation(workspace, "Git.Status", {}))
    assert outcome.status == "succeeded", outcome.error_message
    assert not marker.exists()


async def test_a_repository_with_a_filter_driver_is_refused(
    workspace: Workspace, tmp_path: Path
) -> None:
    marker = tmp_path / "filtered"
    (workspace.project / ".gitattributes").write_text("* filter=evil\n")
    git(workspace.project, "config", "filter.evil.clean", f"{_marker_command(marker)}; cat")
    (workspace.project / "a.txt").write_text("changed\n")
    status = await execute_git_status(invocation(workspace, "Git.Status", {}))
    commit = await execute_git_commit(invocation(workspace, "Git.Commit", {"message": "Clean?"}))
    assert status.status == commit.status == "failed"
    assert commit.error_code == ErrorCode.TOOL_EXECUTION_FAILED
    assert commit.details["refused_config"] == ["filter.evil.clean"]
    assert not marker.exists()


async def test_a_local_remote_runs_neither_its_configured_receive_pack_nor_its_hooks(
    workspace: Workspace, tmp_path: Path
) -> None:
    marker = tmp_path / "received"
    git(
        workspace.project,
        "config",
        "remote.origin.receivepack",
        f"{_marker_command(marker)}; git-receive-pack",
    )
    for name in ("pre-receive", "update", "post-receive"):
        _hook(workspace.allowed_remote / "hooks", name, marker)
    (workspace.project / "a.txt").write_text("pushed\n")
    git(workspace.project, "commit", "-q", "-am", "To push")
    outcome = await execute_git_push(invocation(workspace, "Git.Push", {"branch": "main"}))
    assert outcome.status == "succeeded", outcome.error_message
    assert git(workspace.allowed_remote, "rev-parse", "main") == git(
        workspace.project, "rev-parse", "HEAD"
    )
    assert not marker.exists()


async def test_a_local_remote_checks_nothing_out_and_runs_nothing_its_config_names(
    workspace: Workspace, tmp_path: Path
) -> None:
    """An attack review's root shell: the agent made a non-bare remote whose own config
    checks a pushed branch out (`receive.denyCurrentBranch=updateInstead`) through a smudge
    filter, and a push to it ran the filter as the runtime. The remote's receive-pack refuses
    to update a checked-out branch, runs no maintenance, and never its alternates' command."""
    marker = tmp_path / "smudged"
    remote = workspace.root / "remotes" / "checked-out"
    remote.mkdir(parents=True)
    git(remote, "init", "-q", "-b", "main")
    (remote / ".gitattributes").write_text("*.txt filter=x\n")
    git(remote, "config", "receive.denyCurrentBranch", "updateInstead")
    git(remote, "config", "filter.x.smudge", f"{_marker_command(marker)}; cat")
    git(remote, "config", "core.alternateRefsCommand", _marker_command(marker))
    git(remote, "config", "gc.auto", "1")
    git(remote, "config", "receive.autogc", "true")
    git(workspace.project, "remote", "add", "deploy", str(remote))
    (workspace.project / "a.txt").write_text("pushed\n")
    git(workspace.project, "commit", "-q", "-am", "To push")
    outcome = await execute_git_push(
        invocation(workspace, "Git.Push", {"remote": "deploy", "branch": "main"})
    )
    assert outcome.status == "failed", outcome.output_text
    assert not marker.exists()
    assert not (remote / "a.txt").exists()


async def test_a_local_remotes_alternates_command_never_runs(
    workspace: Workspace, tmp_path: Path
) -> None:
    """A remote that borrows objects from another repository (`objects/info/alternates`)
    lists that repository's refs with `core.alternateRefsCommand`, from its own config, when
    a push asks what it has: the push runs it as `true`. To a branch that is not checked out,
    so the push goes through (and ends without maintenance, `receive.autogc=false`)."""
    marker = tmp_path / "alternates"
    lender = workspace.root / "remotes" / "lender.git"
    lender.mkdir(parents=True)
    git(lender, "init", "-q", "--bare", "-b", "main")
    git(workspace.allowed_remote, "config", "core.alternateRefsCommand", _marker_command(marker))
    git(workspace.allowed_remote, "config", "gc.auto", "1")
    alternates = workspace.allowed_remote / "objects" / "info" / "alternates"
    alternates.write_text(f"{lender / 'objects'}\n")
    git(workspace.project, "branch", "feature")
    outcome = await execute_git_push(invocation(workspace, "Git.Push", {"branch": "feature"}))
    assert outcome.status == "succeeded", outcome.error_message
    assert git(workspace.allowed_remote, "rev-parse", "feature") == git(
        workspace.project, "rev-parse", "feature"
    )
    assert not marker.exists()


async def test_an_ext_remote_is_refused_though_the_repository_allows_the_protocol(
    workspace: Workspace, tmp_path: Path
) -> None:
    marker = tmp_path / "ext"
    git(workspace.project, "config", "protocol.ext.allow", "always")
    git(workspace.project, "remote", "add", "sneaky", f"ext::sh -c touch% {marker}")
    with pytest.raises(ScopeDenied):
        await execute_git_push(
            invocation(workspace, "Git.Push", {"remote": "sneaky", "branch": "main"})
        )
    assert not marker.exists()


async def test_a_git_dir_pointing_outside_the_repository_is_refused(
    workspace: Workspace, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    git(outside, "init", "-q")
    linked = workspace.root / "linked"
    linked.mkdir()
    (linked / ".git").write_text(f"gitdir: {outside / '.git'}\n")
    outcome = await execute_git_status(
        invocation(workspace, "Git.Status", {"repo": "linked"}, allowed_paths=("linked",))
    )
    assert outcome.status == "failed"
    assert "no .git directory of its own" in (outcome.error_message or "")


async def test_the_transport_stays_refused_even_past_the_url_check(
    workspace: Workspace, tmp_path: Path
) -> None:
    """A repository's own `protocol.ext.allow=always` beats `-c protocol.allow=never`;
    `GIT_ALLOW_PROTOCOL` does not yield to it. Run as the executor runs git, with no check
    of the URL before it."""
    marker = tmp_path / "ext-transport"
    git(workspace.project, "config", "protocol.ext.allow", "always")
    git(workspace.project, "remote", "add", "sneaky", f"ext::sh -c touch% {marker}")
    repository = open_repository(workspace.root, "project")
    run = await run_git(repository, "push", "sneaky", "main:main", limit=4096)
    assert run.exit_code != 0
    assert "transport 'ext' not allowed" in run.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    ("key", "value", "listed_as"),
    [
        ("include.path", "../../included.config", "include.path"),
        (
            "url.https://evil.example/.insteadOf",
            "https://allowed.example/",
            "url.https://evil.example/.insteadof",
        ),
        (
            "url.https://evil.example/.pushInsteadOf",
            "https://allowed.example/",
            "url.https://evil.example/.pushinsteadof",
        ),
        ("credential.helper", "!touch /nonexistent/marker", "credential.helper"),
        ("http.proxy", "http://127.0.0.1:9", "http.proxy"),
        ("remote.origin.vcs", "evil", "remote.origin.vcs"),
    ],
)
async def test_a_repository_whose_config_redirects_or_runs_programs_is_refused(
    workspace: Workspace, key: str, value: str, listed_as: str
) -> None:
    git(workspace.project, "config", key, value)
    outcome = await execute_git_status(invocation(workspace, "Git.Status", {}))
    assert outcome.status == "failed"
    assert outcome.details["refused_config"] == [listed_as]


@pytest.mark.skipif(bubblewrap_unusable() is not None, reason="bubblewrap cannot run here")
async def test_git_reads_no_objects_outside_the_workspace(
    workspace: Workspace, tmp_path: Path
) -> None:
    """Another repository on the machine (another person's workspace, say) whose commit id
    the agent learned: its project's alternates name that repository's objects and its
    branch that commit. Run as the runtime, `git diff --staged` printed the other's file."""
    other = tmp_path / "elsewhere" / "alices"
    other.mkdir(parents=True)
    git(other, "init", "-q", "-b", "main")
    (other / "secret.txt").write_text("alice's secret\n")
    git(other, "add", "secret.txt")
    git(other, "commit", "-q", "-m", "hers")
    commit = git(other, "rev-parse", "HEAD").strip()
    dot_git = workspace.project / ".git"
    (dot_git / "objects" / "info" / "alternates").write_text(f"{other / '.git' / 'objects'}\n")
    (dot_git / "refs" / "heads" / "main").write_text(f"{commit}\n")
    git(workspace.project, "read-tree", "--empty")  # the test's git sees the other repo

    outcome = await execute_git_diff(invocation(workspace, "Git.Diff", {"staged": True}))
    said = f"{outcome.output_text} {outcome.error_message}"
    assert "alice's secret" not in said, said  # an empty diff: HEAD names no object it sees
    assert outcome.details["containment"] == "bubblewrap"
