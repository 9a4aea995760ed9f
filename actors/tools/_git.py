"""Git.Status, Git.Diff, Git.Commit and Git.Push: git run on a repository in the workspace.

The runtime has already checked that `repo` is a path the scope allows; these executors run
`git` there as an argv, in the environment `actors.tools._git_run` builds so that nothing the
repository says can run a program, and refuse a repository whose config tries to. Output is
cut at the scope's `max_output_bytes` (`DEFAULT_MAX_OUTPUT_BYTES` when it sets none).

Git.Push checks where the push goes, by the URLs git would push to (`git remote get-url
--push --all`): an https URL's host must be in `allowed_domains` (read as Network.Http reads
it); a local remote (a path, or `file://`) must lie within `allowed_paths`, compared
component by component after symlinks are resolved. Anything else (ssh, `http://`, a
remote helper) is refused. A push never forces: its refspec has no `+` and no `--force`.

An https host allowed by name must also resolve to addresses `allowed_domains` allows (public
ones, or listed), as Network.Http's must: git is told those addresses
(`http.curloptResolve`), so it never asks DNS again, and follows no redirect, so the push
reaches what was checked and nothing else (not the host's loopback services).
"""

from __future__ import annotations

import asyncio
import re
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Final, TypeVar
from urllib.parse import unquote, urlsplit

import msgspec
from msgspec import Struct

from actors.tools._arguments import GitCommit, GitDiff, GitPush, GitStatus
from actors.tools._confinement import sandbox_user_unusable
from actors.tools._contract import (
    Executor,
    Provenance,
    ScopeDenied,
    ToolInvocation,
    ToolOutcome,
)
from actors.tools._destinations import (
    Address,
    Unresolvable,
    allowed_addresses,
    host_allowed,
    ip_literal,
    normalize_host,
)
from actors.tools._git_run import (
    RECEIVE_PACK,
    GitRun,
    GitUnavailable,
    RefusedRepository,
    Repository,
    open_repository,
    refused_settings,
    run_git,
)
from actors.tools._sandbox_lease import lease_sandbox_user
from schemas import Capability, ErrorCode

__all__ = (
    "DEFAULT_MAX_OUTPUT_BYTES",
    "GIT_EXECUTORS",
    "execute_git_commit",
    "execute_git_diff",
    "execute_git_push",
    "execute_git_status",
    "push_url_allowed",
)

DEFAULT_MAX_OUTPUT_BYTES: Final = 256 * 1024
_SMALL: Final = 64 * 1024
_BAD_REF: Final = re.compile(r"^-|[\s:+~^?*\[\\]|\.\.|@\{")
_SCP_LIKE: Final = re.compile(r"^[^/]*:")
"""`host:path`, which git reads as an ssh remote (a colon before any slash)."""

_Arguments = TypeVar("_Arguments", bound=Struct)


class _Failed(Exception):
    """The work failed (git exited non-zero, bad arguments): a `failed` outcome."""

    def __init__(
        self, message: str, code: ErrorCode = ErrorCode.TOOL_EXECUTION_FAILED, **details: object
    ) -> None:
        super().__init__(message)
        self.code = code
        self.details = details


def _within(path: Path, bases: list[Path]) -> bool:
    """Component-wise prefix: `/a/b` is within `/a`, `/ab` is not."""
    return any(path == base or base in path.parents for base in bases)


def push_url_allowed(scope: Capability, workspace: Path, repo_root: Path, url: str) -> None:
    """Refuse a push URL the scope does not allow (see the module's docstring).

    A relative path is relative to the repository (where git runs); `allowed_paths` entries
    relative to the workspace. The path check is a minimal local one (resolve, then compare
    whole components); the runtime's path scopes are the general rule.

    Raises:
        ScopeDenied: rule `allowed_domains`, naming the URL.
    """
    if not (url.isascii() and url.isprintable()) or any(ch.isspace() for ch in url):
        raise ScopeDenied(
            "allowed_domains",
            f"the remote {url!r} holds whitespace, control or non-ASCII characters",
        )
    parts = urlsplit(url) if "://" in url else None
    if parts is not None and parts.scheme.lower() == "https":
        host = normalize_host(parts.hostname or "")
        if host is not None and host_allowed(scope, host):
            return
        raise ScopeDenied("allowed_domains", f"the remote {url!r}: its host is not allowed")
    if parts is not None and parts.scheme.lower() == "file" and parts.netloc in ("", "localhost"):
        local = Path(unquote(parts.path))
    elif parts is None and not _SCP_LIKE.match(url) and "::" not in url:
        local = repo_root / url
    else:
        raise ScopeDenied(
            "allowed_domains",
            f"the remote {url!r}: only https remotes and local paths may be pushed to",
        )
    bases = [(workspace / entry).resolve() for entry in scope.allowed_paths]
    if not _within(local.resolve(), bases):
        raise ScopeDenied("allowed_domains", f"the remote {url!r} is not in allowed_paths")
    if not _within(local.resolve(), [workspace.resolve()]):  # git sees the workspace alone
        raise ScopeDenied("allowed_paths", f"the remote {url!r} is outside the session's workspace")


def curl_resolve(host: str, port: int, addresses: list[Address]) -> str:
    """The git setting that makes curl connect to `addresses` for `host:port`, asking no DNS
    (curl's `CURLOPT_RESOLVE` entry; an IPv6 address in brackets)."""
    listed = ",".join(f"[{a}]" if a.version == 6 else str(a) for a in addresses)
    return f"http.curloptResolve={host}:{port}:{listed}"


async def https_pins(scope: Capability, urls: list[str]) -> list[str]:
    """The `-c` options that send a push to the https URLs' checked addresses, and only there.

    Empty when no URL is https. Each host is resolved once and every address checked
    (`allowed_addresses`); git is told those (`http.curloptResolve`, curl's own pinning) and
    follows no redirect, so neither a second DNS answer nor a server's Location reaches
    anything the check did not allow.

    Raises:
        ScopeDenied: rule `allowed_domains`: a host resolves to an address not allowed.
    """
    pins: list[str] = []
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme.lower() != "https":
            continue
        host = normalize_host(parts.hostname or "")
        try:
            port = parts.port or 443
        except ValueError:
            raise ScopeDenied("allowed_domains", f"the remote {url!r} has no valid port") from None
        if host is None or ip_literal(host) is not None:
            continue  # a literal is its own address, checked with the name by push_url_allowed
        try:
            addresses = await allowed_addresses(scope, host, port)
        except Unresolvable as exc:
            raise _Failed(str(exc)) from None
        # curl looks a name up as the URL spells it: `host.` finds no pin for `host`, and
        # would ask DNS itself (an attack review's rebinding), so both forms are pinned.
        pins += ["-c", curl_resolve(host, port, addresses)]
        pins += ["-c", curl_resolve(f"{host}.", port, addresses)]
    if any(url.lower().startswith("https://") for url in urls):
        pins += ["-c", "http.followRedirects=false"]
    return pins


def _decode(invocation: ToolInvocation, kind: type[_Arguments]) -> _Arguments:
    try:
        return msgspec.convert(invocation.arguments, kind)
    except msgspec.ValidationError as exc:
        raise _Failed(
            f"{invocation.capability} arguments: {exc}", ErrorCode.INVALID_REQUEST
        ) from None


async def _open(invocation: ToolInvocation, repo: str) -> Repository:
    repository = open_repository(invocation.workspace, repo)
    refused = await refused_settings(repository)
    if refused:
        raise RefusedRepository(refused)
    return repository


def _limit(scope: Capability) -> int:
    return DEFAULT_MAX_OUTPUT_BYTES if scope.max_output_bytes is None else scope.max_output_bytes


async def _checked(
    repository: Repository, *arguments: str, limit: int = _SMALL, network: bool = False
) -> GitRun:
    run = await run_git(repository, *arguments, limit=limit, network=network)
    if run.exit_code != 0:
        raise _Failed(run.failure(), exit_code=run.exit_code)
    return run


def _outcome(
    invocation: ToolInvocation, repository: Repository, run: GitRun, **details: object
) -> ToolOutcome:
    return ToolOutcome(
        status="succeeded",
        output_text=run.text,
        truncated=run.truncated,
        details={"exit_code": run.exit_code, "containment": run.containment, **details},
        provenance=Provenance(
            source=invocation.capability, locator=str(repository.root), trust="workspace"
        ),
    )


async def _status(invocation: ToolInvocation) -> ToolOutcome:
    arguments = _decode(invocation, GitStatus)
    repository = await _open(invocation, arguments.repo)
    run = await _checked(
        repository,
        "status",
        "--porcelain=v1",
        "--branch",
        "--untracked-files=all",
        "--ignore-submodules=all",
        limit=_limit(invocation.scope),
    )
    return _outcome(invocation, repository, run)


async def _diff(invocation: ToolInvocation) -> ToolOutcome:
    arguments = _decode(invocation, GitDiff)
    repository = await _open(invocation, arguments.repo)
    staged = ("--staged",) if arguments.staged else ()
    run = await _checked(
        repository,
        "diff",
        "--no-ext-diff",
        "--no-textconv",
        "--ignore-submodules=all",
        *staged,
        limit=_limit(invocation.scope),
    )
    return _outcome(invocation, repository, run)


async def _commit(invocation: ToolInvocation) -> ToolOutcome:
    arguments = _decode(invocation, GitCommit)
    repository = await _open(invocation, arguments.repo)
    paths = ("--", *arguments.paths) if arguments.paths else ()
    await _checked(repository, "add", "--all", *paths)
    run = await _checked(
        repository,
        "commit",
        "--no-verify",
        "--no-edit",
        "-m",
        arguments.message,
        *paths,
        limit=_limit(invocation.scope),
    )
    head = await _checked(repository, "rev-parse", "--verify", "HEAD")
    return _outcome(invocation, repository, run, commit=head.text.strip())


async def _push(invocation: ToolInvocation) -> ToolOutcome:
    arguments = _decode(invocation, GitPush)
    if _BAD_REF.search(arguments.branch) or arguments.remote.startswith("-"):
        raise _Failed(
            f"{arguments.remote!r} {arguments.branch!r} is no remote and branch name",
            ErrorCode.INVALID_REQUEST,
        )
    repository = await _open(invocation, arguments.repo)
    urls = await _checked(repository, "remote", "get-url", "--push", "--all", arguments.remote)
    # One URL a line, split on "\n" alone: str.splitlines() also splits at U+2028 and the
    # like, which git and curl keep inside a URL (an attack review pushed to a host no
    # check saw, past the part of the URL before such a character).
    remote_urls = [url for url in urls.text.split("\n") if url]
    for url in remote_urls:
        push_url_allowed(invocation.scope, repository.workspace, repository.root, url)
    pins = await https_pins(invocation.scope, remote_urls)
    ref = f"refs/heads/{arguments.branch}"
    run = await _checked(
        repository,
        *pins,
        "push",
        "--porcelain",
        "--no-verify",
        "--recurse-submodules=no",
        f"--receive-pack={RECEIVE_PACK}",
        arguments.remote,
        f"{ref}:{ref}",
        limit=_limit(invocation.scope),
        network=bool(pins),  # a local remote is in the workspace: no network needed
    )
    return _outcome(invocation, repository, run, remote_urls=remote_urls)


async def _execute(invocation: ToolInvocation, work: Executor) -> ToolOutcome:
    """Run one git executor under the invocation's timeout, failures as `failed` outcomes.

    Its git runs share one sandbox user (when the runtime is root): the workspace is handed
    to it and back once for the step, not at every run (each is a walk of the workspace)."""
    try:
        async with AsyncExitStack() as lease:
            if sandbox_user_unusable() is None:
                workspace = invocation.workspace.resolve()
                await lease.enter_async_context(lease_sandbox_user(workspace))
            async with asyncio.timeout(invocation.timeout_s):
                return await work(invocation)
    except TimeoutError:
        # A step past its own limit failed to run, as Shell.Exec's does; DEADLINE_EXCEEDED
        # says the call chain's deadline passed (actors/tools/_steps.py `past_deadline`).
        return _failed(
            ErrorCode.TOOL_EXECUTION_FAILED,
            f"git ran past its limit timeout_s ({invocation.timeout_s:g} s)",
        )
    except RefusedRepository as exc:
        return _failed(ErrorCode.TOOL_EXECUTION_FAILED, str(exc), refused_config=list(exc.keys))
    except GitUnavailable as exc:
        return _failed(ErrorCode.TOOL_EXECUTION_FAILED, str(exc))
    except _Failed as exc:
        return _failed(exc.code, str(exc), **exc.details)


def _failed(code: ErrorCode, message: str, **details: object) -> ToolOutcome:
    return ToolOutcome(status="failed", error_code=code, error_message=message, details=details)


async def execute_git_status(invocation: ToolInvocation) -> ToolOutcome:
    """Git.Status: `git status --porcelain=v1 --branch` of the repository."""
    return await _execute(invocation, _status)


async def execute_git_diff(invocation: ToolInvocation) -> ToolOutcome:
    """Git.Diff: the work tree's diff (the index's with `staged`), no external drivers."""
    return await _execute(invocation, _diff)


async def execute_git_commit(invocation: ToolInvocation) -> ToolOutcome:
    """Git.Commit: stage and commit `paths` only (every change when none), as the agent.

    `details["commit"]` is the new commit's id; nothing to commit is a failed run.
    """
    return await _execute(invocation, _commit)


async def execute_git_push(invocation: ToolInvocation) -> ToolOutcome:
    """Git.Push: push `branch` to the same branch of `remote`, never forced.

    Raises:
        ScopeDenied: rule `allowed_domains`: a push URL of the remote is not allowed;
            nothing was pushed.
    """
    return await _execute(invocation, _push)


GIT_EXECUTORS: Final[dict[str, Executor]] = {
    "Git.Status": execute_git_status,
    "Git.Diff": execute_git_diff,
    "Git.Commit": execute_git_commit,
    "Git.Push": execute_git_push,
}
