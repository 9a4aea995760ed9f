"""Whether a scope allows a command: an argv, checked program by program.

A command is an argv run without a shell, so shell metacharacters inside its arguments are
just bytes. What matters is which programs it runs, and each of them must be allowed:

1. Every program's name is a plain name (`git`, `python3.12`, `g++`: letters, digits and
   `._+-`, not starting with `.` or `-`) or an absolute path of such names. A relative path
   (`./run`, `bin/tool`) is refused: it runs a file the agent may have written.
2. A program is blocked when its basename is the basename of any `blocked_commands` entry
   (blocked `rm` refuses `rm` and `/bin/rm`; blocked `/bin/rm` refuses `rm` too, which the
   runner's search path may find as `/bin/rm`). Blocking by basename can only refuse more.
3. A program is allowed only when `allowed_commands` holds exactly its name: an entry that
   is a bare name (`git`) allows the bare name, which the shell runner finds on its search
   path (which must never include the workspace); an absolute entry (`/usr/bin/git`) allows
   that path.
   A bare entry does not allow an absolute path by basename, since `/workspace/bin/git`
   has the basename `git` and is whatever the agent wrote there. An empty list allows
   nothing.
4. A wrapper (`env`, `timeout`, `xargs`, `find -exec`, a shell ...) must be allowed itself,
   and then every program it would run is checked by these same rules (`env X=1 rm` checks
   `rm`). A shell runs only a script file that is itself an `allowed_commands` entry, and
   never a string (`sh -c`, `bash -s`, stdin). Some wrappers are refused even when allowed
   (`sudo`, `ssh`, `watch` ...: see `actors/tools/_wrappers.NEVER`). `git` is allowed only
   with options and subcommands that run no other program (`actors/tools/_git_argv.py`).

An interpreter (`python`, `node`, `make`, `pytest`) runs whatever code its files hold: to
allow one is to allow any code it is given, bounded only by the runner's containment.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from typing import Final

from actors.tools._contract import ScopeDenied
from actors.tools._git_argv import check_git_argv
from actors.tools._wrappers import APPENDING, NEVER, SHELLS, WRAPPERS, shell_script
from schemas import Capability

__all__ = ("check_command",)

_NAME: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*")
MAX_WRAPPER_DEPTH: Final = 8
"""`nohup timeout 5 env nice rm` nests wrappers; past this depth the command is refused."""


def check_command(scope: Capability, argv: Sequence[str]) -> None:
    """Refuse `argv` unless every program it would run is allowed and none is blocked.

    Raises:
        ScopeDenied: rule `blocked_commands` for a blocked program, else `allowed_commands`
            (not allowed, a malformed program name, a shell string, a wrapper refused),
            with a message naming the program.
    """
    if not argv:
        raise ScopeDenied("allowed_commands", "the command is empty")
    if any("\x00" in arg for arg in argv):
        raise ScopeDenied("allowed_commands", "an argument holds a NUL byte")
    _check_program(scope, tuple(argv), depth=0)


def _check_program(scope: Capability, argv: tuple[str, ...], depth: int) -> None:
    program, args = argv[0], argv[1:]
    if depth > MAX_WRAPPER_DEPTH:
        raise ScopeDenied("allowed_commands", f"{program!r}: wrappers nested too deep")
    _check_name(program)
    _check_listed(scope, program)
    name = posixpath.basename(program)
    if name in NEVER:
        raise ScopeDenied("allowed_commands", f"{program!r} {NEVER[name]}")
    if name in SHELLS:
        script = shell_script(program, args)
        _check_listed(scope, script, what="script")
    elif name in WRAPPERS:
        for inner in WRAPPERS[name](args):
            if name in APPENDING and _chooses_programs(inner[0]):
                raise ScopeDenied(
                    "allowed_commands",
                    f"{program!r} gives {inner[0]!r} arguments this check cannot see, and "
                    f"{inner[0]!r} runs the programs its arguments name",
                )
            _check_program(scope, inner, depth + 1)
    elif name == "git":
        check_git_argv(args)


def _chooses_programs(program: str) -> bool:
    """A program whose arguments name another program to run."""
    name = posixpath.basename(program)
    return name in SHELLS or name in WRAPPERS or name in NEVER or name == "git"


def _check_name(program: str) -> None:
    """A plain name, or an absolute path of plain names; nothing a shell or search could
    read differently from the file it names."""
    if "/" not in program:
        if not _NAME.fullmatch(program):
            raise ScopeDenied(
                "allowed_commands",
                f"program {program!r} is not a plain name (letters, digits and ._+-)",
            )
        return
    if not program.startswith("/"):
        raise ScopeDenied(
            "allowed_commands", f"program {program!r} is a relative path: name it absolutely"
        )
    if not all(_NAME.fullmatch(part) for part in program[1:].split("/")):
        raise ScopeDenied("allowed_commands", f"program {program!r} is not a plain absolute path")


def _check_listed(scope: Capability, program: str, what: str = "program") -> None:
    """Blocked by basename, allowed only by an exact entry."""
    name = posixpath.basename(program)
    for entry in scope.blocked_commands:
        if posixpath.basename(entry) == name:
            raise ScopeDenied("blocked_commands", f"{what} {program!r} is blocked by {entry!r}")
    if program not in scope.allowed_commands:
        why = (
            "allowed_commands is empty (allows nothing)"
            if not scope.allowed_commands
            else "not in allowed_commands"
        )
        raise ScopeDenied("allowed_commands", f"{what} {program!r}: {why}")
