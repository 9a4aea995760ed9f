"""Running `git` on a repository an agent may have written: nothing in it may run a command.

A repository's own `.git/config` is read by every git command, and an agent with File.Write
can write it. Several settings there run a program of the config's choosing: hooks (the
default `.git/hooks` and `core.hooksPath`), `core.fsmonitor` (run by `git status`), filter
drivers (run on `add` and `status`), external diff and textconv drivers, credential
helpers, `ext::` and other remote helpers, a local remote's `receivepack`, and a pager or
editor. Each is closed, by an override git cannot be talked out of, or by refusing the
repository:

- overridden on every call: `-c core.hooksPath=/dev/null`, `-c core.fsmonitor=false`,
  `-c credential.helper=` (empties the helper list), signing off, `--no-pager`, the editor
  `true`, no prompts (`GIT_TERMINAL_PROMPT=0`, an empty `GIT_ASKPASS`), and only the `file`
  and `https` transports (`-c protocol.allow=never` with those two set to always, and
  `GIT_ALLOW_PROTOCOL=file:https`, which, unlike the config, a repository's own
  `protocol.ext.allow` cannot widen). ssh is not allowed: its client reads its own
  configuration and can run a proxy command of it;
- no system or global config (`GIT_CONFIG_NOSYSTEM=1`, `GIT_CONFIG_GLOBAL=/dev/null`), `HOME`
  the workspace, and only `PATH` and a C locale from the runtime's environment;
- `GIT_DIR` and `GIT_WORK_TREE` set to the repository itself, whose `.git` must be a real
  directory (not a symlink, not a `gitdir:` file, no `commondir`), so git never discovers or
  follows a repository outside the one the scope allowed;
- refused (`RefusedRepository`): a config setting any key of `_REFUSED_KEYS` (filter
  drivers, URL rewriting, includes, `http.*`, credential settings, remote helpers and
  proxies), since their names are the config's own and no fixed override reaches them all.

And then every git run is contained as a Shell.Exec command is (actors/tools/_contained.py):
under bubblewrap, as a sandbox user when the runtime is root, seeing only its workspace and,
unless it pushes to an https remote, no network. The list above is a first line: a setting
it misses runs a program as that sandbox user, in that sandbox, never as the runtime (an
attack review ran a local remote's smudge filter as root before the runs were contained).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from actors.tools._confinement import ShellLimits
from actors.tools._contained import run_contained

__all__ = (
    "AGENT_IDENTITY",
    "GitRun",
    "GitUnavailable",
    "RefusedRepository",
    "Repository",
    "git_environment",
    "open_repository",
    "refused_settings",
    "run_git",
)

AGENT_IDENTITY: Final = ("Parley agent", "agent@parley.invalid")
"""The author and committer of every commit an agent makes: never the machine's user."""

SAFE_OPTIONS: Final = (
    "--no-pager",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "credential.helper=",
    "-c",
    "protocol.allow=never",
    "-c",
    "protocol.file.allow=always",
    "-c",
    "protocol.https.allow=always",
    "-c",
    "commit.gpgSign=false",
    "-c",
    "tag.gpgSign=false",
    "-c",
    "push.gpgSign=false",
    "-c",
    "submodule.recurse=false",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "color.ui=false",
)
"""Options before every git subcommand; `-c` settings win over the repository's config."""

RECEIVE_PACK: Final = (
    "git -c core.hooksPath=/dev/null -c core.fsmonitor=false"
    " -c receive.denyCurrentBranch=refuse -c receive.autogc=false"
    " -c core.alternateRefsCommand=true receive-pack"
)
"""The program a push to a local remote runs there, in place of the remote's configured one
(`remote.<name>.receivepack` is a command line), with `-c` settings that win over the
remote's own config, which an agent may have written: no hooks and no fsmonitor; no checkout
of a pushed branch (`updateInstead` would check it out through the remote's filters, as the
runtime: an attack review's root shell), no maintenance after the push, and no command to
list an alternate's refs."""

_REFUSED_KEYS: Final = re.compile(
    r"^(?:filter\..+\.(?:clean|smudge|process)"
    r"|url\..+\.(?:insteadof|pushinsteadof)"
    r"|include\.path|includeif\..+\.path"
    r"|http\..+"
    r"|credential\..+"
    r"|remote\..+\.(?:vcs|proxy|uploadpack)"
    r"|core\.(?:alternaterefscommand|sshcommand|gitproxy))$"
)
_CONFIG_LIMIT: Final = 1024 * 1024


class GitUnavailable(Exception):
    """The repository cannot be used (no `.git` of its own, git missing): a failed run."""


class RefusedRepository(GitUnavailable):
    """The repository's config names a program to run; refused before any git command."""

    def __init__(self, keys: Sequence[str]) -> None:
        super().__init__(
            "the repository's configuration sets "
            + ", ".join(keys)
            + ", which would run a program or send the request elsewhere; refused"
        )
        self.keys = tuple(keys)


@dataclass(frozen=True, slots=True)
class Repository:
    """A work tree with its own `.git` directory, and the workspace it lives in."""

    root: Path
    workspace: Path

    @property
    def git_dir(self) -> Path:
        return self.root / ".git"


@dataclass(frozen=True, slots=True)
class GitRun:
    exit_code: int
    stdout: bytes
    truncated: bool
    stderr: str
    containment: str = ""
    """How it ran contained (`ShellRun.containment`: `bubblewrap`, `sandbox-user`, ...)."""
    limit_hit: str | None = None
    """The resource limit that ended it, if one did."""

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    def failure(self) -> str:
        said = (self.stderr.strip() or self.text.strip())[-2000:]
        limit = f" (stopped by its {self.limit_hit})" if self.limit_hit else ""
        return f"git exited with {self.exit_code}{limit}: {said}"


def open_repository(workspace: Path, repo: str) -> Repository:
    """The repository `repo` names (relative to the workspace unless absolute).

    Raises:
        GitUnavailable: no such directory, one outside the workspace (git runs contained in
            the workspace alone), or its `.git` is a symlink, a `gitdir:` file or shares
            another repository's (`commondir`).
    """
    root = (workspace / repo).resolve()
    git_dir = root / ".git"
    if not root.is_relative_to(workspace.resolve()):
        raise GitUnavailable(
            f"{repo!r} is outside the session's workspace: git runs in the workspace alone, "
            "contained as a command is (docs/tools.md)"
        )
    if not root.is_dir():
        raise GitUnavailable(f"{repo!r} is not a directory")
    if git_dir.is_symlink() or not git_dir.is_dir():
        raise GitUnavailable(f"{repo!r} has no .git directory of its own")
    if (git_dir / "commondir").exists():
        raise GitUnavailable(f"{repo!r} shares another repository's .git (commondir)")
    return Repository(root=root, workspace=workspace.resolve())


def git_environment(repository: Repository) -> dict[str, str]:
    """The whole environment of a git command: nothing from the runtime's but PATH."""
    name, email = AGENT_IDENTITY
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C",
        "LC_ALL": "C",
        "HOME": str(repository.workspace),
        "XDG_CONFIG_HOME": "/dev/null",
        "GIT_DIR": str(repository.git_dir),
        "GIT_WORK_TREE": str(repository.root),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_ALLOW_PROTOCOL": "file:https",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "",
        "GIT_PAGER": "cat",
        "PAGER": "cat",
        "GIT_EDITOR": "true",
        "GIT_SEQUENCE_EDITOR": "true",
        "GIT_LITERAL_PATHSPECS": "1",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
    }


GIT_LIMITS: Final = ShellLimits(
    cpu_seconds=600, file_size_bytes=4 << 30, open_files=4096, processes=64
)
"""The resource limits of a git run: the step's timeout bounds it first; room for a large
file added or a large pack pushed (Shell.Exec's 128 MiB file limit would stop them)."""


async def run_git(
    repository: Repository,
    *arguments: str,
    limit: int,
    network: bool = False,
    timeout_s: float = 600.0,
) -> GitRun:
    """Run `git SAFE_OPTIONS arguments...` as an argv in the repository, contained as a
    Shell.Exec command is (actors/tools/_contained.py): under bubblewrap where it runs, as a
    sandbox user when the runtime is root, seeing only the workspace; stdout capped at `limit`.

    Everything the overrides above close is closed again by the containment: a setting they
    miss runs as the sandbox user, inside the sandbox, never as the runtime. `network`: the
    run may reach the network (a push to an https remote). Every process of the run is
    killed if the caller is cancelled or times out, or after `timeout_s`.

    Raises:
        GitUnavailable: no `git` program on PATH.
        TimeoutError: it ran past `timeout_s`.
    """
    environment = git_environment(repository)
    del environment["PATH"], environment["HOME"]  # the sandbox's fixed ones (HOME the same)
    try:
        run = await run_contained(
            ["git", *SAFE_OPTIONS, *arguments],
            cwd=repository.root,
            workspace=repository.workspace,
            environment=environment,
            timeout_s=timeout_s,
            max_output_bytes=limit,
            limits=GIT_LIMITS,
            network=network,
            stderr_apart=True,
        )
    except FileNotFoundError:
        raise GitUnavailable("no git program on PATH") from None
    if run.timed_out:
        raise TimeoutError(f"git ran past {timeout_s:g} s")
    exit_code = run.exit_code if run.exit_code is not None else 128 + (run.signal or 0)
    errors = run.errors.decode("utf-8", "replace")
    return GitRun(exit_code, run.output, run.truncated, errors, run.containment, run.limit_hit)


async def refused_settings(repository: Repository) -> list[str]:
    """The keys of the repository's config (includes expanded) that `_REFUSED_KEYS` names.

    The `-c` overrides of `SAFE_OPTIONS` are listed too, in scope `command`: they are ours.
    """
    listing = await run_git(
        repository, "config", "--list", "-z", "--show-scope", limit=_CONFIG_LIMIT
    )
    if listing.exit_code != 0 or listing.truncated:
        return ["its configuration (unreadable or over 1 MiB)"]
    fields = listing.stdout.split(b"\0")
    keys = {
        entry.partition(b"\n")[0].decode("utf-8", "replace")
        for scope, entry in zip(fields[0::2], fields[1::2], strict=False)
        if scope != b"command"
    }
    return sorted(key for key in keys if _REFUSED_KEYS.match(key.lower()))
