"""What a `git` command line may ask for when a scope allows `git`: nothing that runs another
program.

git runs programs named on its command line in many ways: `-c core.sshCommand=...`,
`-c alias.x='!cmd'`, `--exec-path`, `--upload-pack`/`--receive-pack`/`--exec`, a
`ext::<command>` remote, `rebase --exec`, `clone --template` (hooks copied in),
`grep --open-files-in-pager`, and subcommands that exist to run one (`submodule foreach`,
`bisect run`, `difftool`, `filter-branch`) or that change configuration (`config`). The rules
here are an allowlist: global options and subcommands this module knows run no other program;
anything else is refused, including an alias (which the repository's configuration may
define as `!command`).

What a command line cannot show is left to containment: git also runs programs named by the
repository's own configuration and hooks (`core.fsmonitor`, `core.pager`, `.git/hooks/*`), which
an earlier step may have written. The git executor and the shell runner must disable them,
and a scope can block `.git` for the File capabilities (docs/tools.md, "Scopes").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from actors.tools._contract import ScopeDenied

__all__ = ("check_git_argv",)

_GLOBAL_FLAGS: Final = frozenset(
    {"--no-pager", "-P", "-p", "--paginate", "--no-replace-objects", "--bare", "--no-advice"}
    | {"--literal-pathspecs", "--glob-pathspecs", "--noglob-pathspecs", "--icase-pathspecs"}
    | {"--no-optional-locks", "--version", "--help"}
)
_GLOBAL_VALUED: Final = frozenset({"-C", "--git-dir", "--work-tree", "--namespace"})

_SUBCOMMANDS: Final = frozenset(
    {"add", "am", "apply", "archive", "blame", "branch", "cat-file", "check-attr"}
    | {"check-ignore", "checkout", "cherry", "cherry-pick", "clean", "clone", "commit"}
    | {"commit-tree", "count-objects", "describe", "diff", "diff-files", "diff-index"}
    | {"diff-tree", "fetch", "for-each-ref", "format-patch", "fsck", "gc", "grep"}
    | {"hash-object", "init", "log", "ls-files", "ls-remote", "ls-tree", "merge", "merge-base"}
    | {"mv", "name-rev", "notes", "pull", "push", "range-diff", "rebase", "reflog", "remote"}
    | {"reset", "restore", "rev-list", "rev-parse", "revert", "rm", "shortlog", "show"}
    | {"show-ref", "stash", "status", "switch", "symbolic-ref", "tag", "update-index"}
    | {"update-ref", "version", "whatchanged", "worktree", "write-tree"}
)
"""Subcommands that run no program of the caller's choosing from their arguments."""

_PROGRAM_OPTIONS: Final = (
    *("--upload-pack", "--receive-pack", "--exec", "--extcmd", "--template", "--config"),
    *("--open-files-in-pager", "--ext-diff", "--tool", "--interactive"),
)
"""Long options (and their `=value` forms) that name a program, configuration or an editor
session; `--exec` also covers `--exec-path`."""

_PROGRAM_LETTERS: Final = {
    "clone": frozenset("uc"),  # -u <upload-pack>, -c <key=value>
    "ls-remote": frozenset("u"),  # -u <upload-pack>
    "rebase": frozenset("xi"),  # -x <command>, -i (an editor)
    "grep": frozenset("O"),  # -O[<pager>]
}
"""Short options, per subcommand, that name a program to run."""

_REMOTE_HELPER: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")
"""`<transport>::<address>` runs `git-remote-<transport>`; `ext::` runs any command."""


def _refuse(message: str) -> ScopeDenied:
    return ScopeDenied("allowed_commands", f"git: {message}")


def check_git_argv(args: Sequence[str]) -> None:
    """Refuse a git command line (after `git`) that could run a program of its choosing.

    Raises:
        ScopeDenied: with rule `allowed_commands`, naming the option or subcommand.
    """
    index = 0
    while index < len(args) and args[index].startswith("-"):
        name, equals, _ = args[index].partition("=")
        if name in _GLOBAL_VALUED:
            index += 1 if equals else 2
        elif name in _GLOBAL_FLAGS and not equals:
            index += 1
        else:
            raise _refuse(f"global option {args[index]!r} is not one this check allows")
    if index >= len(args):
        return
    subcommand, rest = args[index], args[index + 1 :]
    if subcommand not in _SUBCOMMANDS:
        raise _refuse(f"subcommand {subcommand!r} is not one known to run no other program")
    letters = _PROGRAM_LETTERS.get(subcommand, frozenset())
    for arg in rest:
        if arg.startswith(_PROGRAM_OPTIONS):
            raise _refuse(f"option {arg!r} names a program to run")
        if _REMOTE_HELPER.match(arg):
            raise _refuse(f"{arg!r} is a remote helper address, which runs a program")
        if arg.startswith("-") and not arg.startswith("--") and letters & set(arg[1:]):
            raise _refuse(f"{subcommand} option {arg!r} names a program to run")
