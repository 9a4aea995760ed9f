"""Programs that run another program named in their arguments, and how to find it.

`env rm -rf /`, `timeout 5 rm`, `xargs rm` and `find . -exec rm {} ;` all run `rm`: a scope
that allows `env` but not `rm` must still refuse them. Each wrapper's command line is parsed
here with its own option table, to find the programs it would run; `check_command` then
checks each of those as it checks `argv[0]`.

The tables are written to fail closed: an option a table does not know (an abbreviated long
option, another implementation's extension) is refused rather than guessed at, since a wrong
guess about which option takes a value could hide the program that really runs. The options
GNU, BSD and BusyBox share are known; the GNU tools stop at their first operand, as these
parsers do (their option strings start with `+`).

Shells get their own rules (`shell_script`): a command is an argv, never a shell string, so
`-c` and every way of feeding a shell its commands on stdin are refused, and the script a
shell runs must itself be allowed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from actors.tools._contract import ScopeDenied

__all__ = ("APPENDING", "NEVER", "SHELLS", "WRAPPERS", "shell_script")

Argv = tuple[str, ...]

SHELLS: Final = frozenset(
    {"sh", "bash", "rbash", "dash", "ash", "zsh", "ksh", "mksh", "pdksh", "yash", "posh"}
    | {"fish", "csh", "tcsh"}
)

NEVER: Final = {
    **dict.fromkeys(
        ("sudo", "su", "doas", "pkexec", "runuser", "sg", "newgrp", "setpriv", "capsh"),
        "changes user or privileges, which a tool never does",
    ),
    **dict.fromkeys(
        ("chroot", "unshare", "nsenter", "systemd-run", "strace", "ltrace", "gdb", "ionice"),
        "runs another program with options this check does not follow",
    ),
    **dict.fromkeys(
        ("taskset", "chrt", "prlimit", "flock", "expect", "screen", "tmux", "dtach", "at"),
        "runs another program with options this check does not follow",
    ),
    **dict.fromkeys(
        ("ssh", "rsh", "watch", "script", "parallel", "batch", "crontab", "eval", "exec"),
        "takes a shell string, and a command is an argv, never a shell string",
    ),
    **dict.fromkeys(("command", "builtin"), "runs another program by name"),
}
"""Wrappers refused even when `allowed_commands` names them, with the reason."""


def _refuse(wrapper: str, message: str) -> ScopeDenied:
    return ScopeDenied("allowed_commands", f"{wrapper}: {message}")


@dataclass(frozen=True, slots=True)
class _Options:
    """One wrapper's options, enough to find where the program it runs begins."""

    flags: frozenset[str] = frozenset()
    """Options with no value (`-i`, `--null`)."""
    valued: frozenset[str] = frozenset()
    """Options with a value, attached (`-n5`, `--max-args=5`) or the next argument."""
    optional: frozenset[str] = frozenset()
    """Options whose value, if any, is attached (`-i[R]`, `--replace[=R]`)."""
    operands: int = 0
    """Operands before the program (timeout's duration)."""
    numeric: bool = False
    """`-N` is an option (nice's legacy `-10`)."""
    default: Argv = field(default=())
    """The program run when none is named (xargs runs echo)."""


def _skip_options(wrapper: str, args: Argv, options: _Options) -> int:
    """The index of the first argument after the options (and `--`)."""
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            return index + 1
        if not arg.startswith("-") or arg == "-":
            return index
        if arg.startswith("--"):
            name, equals, _ = arg.partition("=")
            if name in options.valued:
                index += 1 if equals else 2
            elif name in options.optional or (name in options.flags and not equals):
                index += 1
            else:
                raise _refuse(wrapper, f"option {arg!r} is not one this check knows")
            continue
        if options.numeric and arg[1:].isdigit():
            index += 1
            continue
        index += 1 + _short_cluster(wrapper, arg, options)
    return index


def _short_cluster(wrapper: str, arg: str, options: _Options) -> int:
    """How many following arguments a cluster of short options (`-rn5`, `-t -n 5`) takes."""
    for position, letter in enumerate(arg[1:], start=1):
        option = "-" + letter
        if option in options.valued:
            return 1 if position == len(arg) - 1 else 0
        if option in options.optional:
            return 0
        if option not in options.flags:
            raise _refuse(wrapper, f"option {option!r} is not one this check knows")
    return 0


def _after_options(wrapper: str, options: _Options) -> Callable[[Argv], list[Argv]]:
    def programs(args: Argv) -> list[Argv]:
        start = _skip_options(wrapper, args, options) + options.operands
        inner = args[start:]
        if inner:
            return [inner]
        return [options.default] if options.default else []

    return programs


def _set(*names: str) -> frozenset[str]:
    return frozenset(names)


_CODE_CHOOSING_NAMES: Final = (
    _set("PATH", "HOME", "ENV", "BASH_ENV", "IFS", "SHELL", "SHELLOPTS", "BASHOPTS", "CDPATH")
    | _set("PS4", "PROMPT_COMMAND", "ZDOTDIR", "EDITOR", "VISUAL", "PAGER", "BROWSER", "TMPDIR")
    | _set("NODE_OPTIONS", "NODE_PATH", "PERL5LIB", "PERLLIB", "PERL5OPT", "RUBYLIB", "RUBYOPT")
    | _set("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH", "GEM_PATH")
)
_CODE_CHOOSING_PREFIXES: Final = (
    *("LD_", "DYLD_", "GIT_", "PYTHON", "BASH_FUNC_", "XDG_", "SSH_", "GCONV_", "LESS", "MAN"),
    *("NPM_CONFIG_", "GEM_", "CARGO_"),
)


def _environment_name_refused(name: str) -> bool:
    """A variable that chooses which code, configuration or program a process loads.

    `env PATH=. git` runs a `git` the agent wrote, `env LD_PRELOAD=x.so ls` loads its
    library into an allowed program, `env HOME=. git status` reads its `.gitconfig`: each
    turns an allowed program into any program, so `env` may not set them.
    """
    upper = name.upper()
    return upper in _CODE_CHOOSING_NAMES or upper.startswith(_CODE_CHOOSING_PREFIXES)


_ENV_OPTIONS: Final = _Options(
    flags=_set("-i", "--ignore-environment", "-0", "--null", "-v", "--debug"),
    valued=_set("-u", "--unset", "-C", "--chdir"),
)


def _env(args: Argv) -> list[Argv]:
    """`env [-i] [-u NAME] [NAME=VALUE]... [PROGRAM ARGS]`; `-S` (split a string into an
    argv) and `-P` (another search path) are unknown to the table, so refused."""
    index = _skip_options("env", args, _ENV_OPTIONS)
    while index < len(args) and "=" in args[index]:
        name = args[index].partition("=")[0]
        if _environment_name_refused(name):
            raise _refuse("env", f"may not set {name}: it chooses which code a program runs")
        index += 1
    return [args[index:]] if index < len(args) else []


_FIND_ACTIONS: Final = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


def _find(args: Argv) -> list[Argv]:
    """Every program `find`'s `-exec`, `-execdir`, `-ok` and `-okdir` would run.

    Each occurrence is taken, even one that is really the value of another test
    (`-name -exec`): checking more than runs can only refuse more.
    """
    programs: list[Argv] = []
    for index, arg in enumerate(args):
        if arg not in _FIND_ACTIONS:
            continue
        end = index + 1
        while end < len(args) and not _ends_action(args, end):
            end += 1
        if end == len(args):
            raise _refuse("find", f"{arg} has no terminating ';' or '+'")
        if end == index + 1:
            raise _refuse("find", f"{arg} names no program")
        programs.append(args[index + 1 : end])
    return programs


def _ends_action(args: Argv, index: int) -> bool:
    return args[index] == ";" or (args[index] == "+" and args[index - 1] == "{}")


def _busybox(args: Argv) -> list[Argv]:
    """`busybox APPLET ARGS` runs the applet; `--install` and the like are refused."""
    if not args:
        return []
    if args[0].startswith("-"):
        raise _refuse("busybox", f"option {args[0]!r} is not one this check allows")
    return [args]


WRAPPERS: Final[dict[str, Callable[[Argv], list[Argv]]]] = {
    "env": _env,
    "find": _find,
    "busybox": _busybox,
    "nohup": _after_options("nohup", _Options()),
    "timeout": _after_options(
        "timeout",
        _Options(
            flags=_set("--preserve-status", "--foreground", "-v", "--verbose"),
            valued=_set("-k", "--kill-after", "-s", "--signal"),
            operands=1,
        ),
    ),
    "nice": _after_options("nice", _Options(valued=_set("-n", "--adjustment"), numeric=True)),
    "xargs": _after_options(
        "xargs",
        _Options(
            flags=_set("-0", "--null", "-p", "--interactive", "-r", "--no-run-if-empty")
            | _set("-t", "--verbose", "-x", "--exit", "-o", "--open-tty", "--show-limits"),
            valued=_set("-a", "--arg-file", "-d", "--delimiter", "-E", "-I", "-L", "-n")
            | _set("--max-args", "-P", "--max-procs", "-s", "--max-chars", "--process-slot-var"),
            optional=_set("-e", "-i", "-l", "--eof", "--replace", "--max-lines"),
            default=("echo",),
        ),
    ),
    "stdbuf": _after_options(
        "stdbuf", _Options(valued=_set("-i", "-o", "-e", "--input", "--output", "--error"))
    ),
    "time": _after_options(
        "time",
        _Options(
            flags=_set("-a", "--append", "-p", "--portability", "-v", "--verbose", "-q", "--quiet"),
            valued=_set("-f", "--format", "-o", "--output"),
        ),
    ),
    "setsid": _after_options(
        "setsid", _Options(flags=_set("-c", "--ctty", "-f", "--fork", "-w", "--wait"))
    ),
}
"""Wrappers followed when allowed: each gives the argvs of the programs it would run."""

APPENDING: Final = frozenset({"xargs", "find"})
"""Wrappers that give the program they run more arguments than the command line shows:
xargs appends its input's words, `find -exec` the file names it finds. The program they
run is checked on what is seen, so it may not be one whose arguments choose a program
(a wrapper, a shell, git): `xargs env` with `rm -rf .` on its input runs `rm`."""

_SHELL_LONG_FLAGS: Final = _set("--norc", "--noprofile", "--posix", "--restricted", "--login")
_SHELL_LONG_FLAGS_MORE: Final = _set("--noediting", "--verbose", "--version", "--help")
_SHELL_STRING_LETTERS: Final = frozenset("csiC")
"""`-c STRING` (and fish's `-C`), `-s` (commands on stdin), `-i` (interactive, on stdin)."""
_SHELL_VALUED_LETTERS: Final = frozenset("oO")
"""`-o OPTION`, `-O SHOPT` (and `+o`, `+O`): the next argument is an option's name."""


def shell_script(shell: str, args: Sequence[str]) -> str:
    """The script file a shell would run; its commands must never come from a string.

    Raises:
        ScopeDenied: `-c`, `-s`, `-i`, a long option not known to take no value, or no
            script at all (the shell would read its commands from stdin).
    """
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in ("--", "-"):
            index += 1
            break
        if arg.startswith("--"):
            if arg not in _SHELL_LONG_FLAGS | _SHELL_LONG_FLAGS_MORE:
                raise _refuse(shell, f"option {arg!r} is not one this check allows")
            index += 1
            continue
        if not arg.startswith(("-", "+")):
            break
        letters = frozenset(arg[1:])
        if letters & _SHELL_STRING_LETTERS:
            raise _refuse(shell, "a command is an argv, never a shell string (-c, -s, -i)")
        index += 2 if letters & _SHELL_VALUED_LETTERS else 1
    if index >= len(args):
        raise _refuse(shell, "with no script it reads a shell string from stdin")
    return args[index]
