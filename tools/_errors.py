"""How a `parley` command fails: one line that says what happened and what to do next.

Every command runs under `run_guarded` (tools/cli.py). Whatever escapes a command becomes one
line on standard error, `parley <command>: <what happened>; <what to do next>`, and an exit
code (docs/cli.md): 2 for a configuration that cannot work (an invalid or missing file,
credentials the broker refuses), 3 for a server that cannot be reached, 130 for Ctrl-C, and 1
for anything else. The traceback is printed only with `parley --debug …` (or
`PARLEY_DEBUG=1`), for a person reporting a bug, not for a person using the tool.

A refusal by the broker raises nothing in nats-py (tools/_refused.py): the command sees a
timeout, or gives up and returns its own code. Either way, when the broker refused something
and the command failed, the refusal is what the person is told: the user it was refused as,
and the subject or JetStream API call it may not use.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec
import nats.errors
import nats.js.errors
import pydantic

from bus import ConfigError, NatsServerError, ProvisionError
from tools._local_owner import local_system_alive
from tools._refused import Refusals, refusal_line

__all__ = (
    "DEBUG_ENV",
    "EXIT_CONFIG",
    "EXIT_FAILED",
    "ServerUnreachable",
    "debug_traceback",
    "explain",
    "refusal_seen",
    "refused_so_far",
    "report_failure",
    "run_guarded",
    "wants_debug",
)

DEBUG_ENV: Final = "PARLEY_DEBUG"
EXIT_FAILED: Final = 1
EXIT_CONFIG: Final = 2
EXIT_UNREACHABLE: Final = 3
EXIT_INTERRUPTED: Final = 130


class ServerUnreachable(ConfigError):
    """No NATS server answered at the settings' URL. A ConfigError, for the commands that
    say a bad setting in one line, but its exit code is 3 (nothing reached: the local system
    may simply not be running), whichever code a command gives its configuration errors."""


_UP_HINT: Final = "is `parley up` running in this directory? (or set NATS_URL to your server)"
_SLOW_UP_HINT: Final = (
    "`parley up` runs in this directory and its server took too long: a cluster that lost "
    "most of its nodes answers nothing until they are back (`parley up --cluster` restarts "
    "none: start it again), or the machine is overloaded"
)


def _slow_server_hint() -> str:
    """What to check when the server took too long: whether anything runs is known here."""
    if "NATS_URL" not in os.environ and local_system_alive():
        return _SLOW_UP_HINT  # a newcomer's walk was asked whether `parley up` ran: it did
    return _UP_HINT


_MAKERS: Final = (
    (
        ".nk",
        "an nkey seed: `parley up` writes the local system's under .parley/broker/seeds/, "
        "`parley nats-config --out DIR` a deployment's",
    ),
    ("policy.key", "`parley policy keygen --out DIR` writes it"),
    ("policy.pub", "`parley policy keygen --out DIR` writes it"),
    ("tokens.json", "`parley console token --person NAME` writes it"),
    (".parley/", "`parley up` makes it in the directory it runs in: run the command there"),
)


def wants_debug(arguments: list[str]) -> tuple[bool, list[str]]:
    """Whether tracebacks are wanted (`--debug` before the command, or `PARLEY_DEBUG=1`),
    and the arguments without that flag."""
    debug = os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes")
    rest = list(arguments)
    while rest[:1] == ["--debug"]:
        debug = True
        rest.pop(0)
    return debug, rest


def one_line(text: str) -> str:
    """A message of several lines (a title, then one indented line per problem, as
    bus.describe_invalid writes) as one: the title, then the problems joined by "; "."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        return lines[0] if lines else ""
    return f"{lines[0]} {'; '.join(lines[1:])}"


def _missing(path: str) -> str:
    """Which file is missing and what makes it."""
    for marker, maker in _MAKERS:
        if marker in path.replace(os.sep, "/"):
            return f"no such file: {path}; {maker}"
    return f"no such file: {path} (in {Path.cwd()}); check the path"


def _invalid(exc: pydantic.ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(part) for part in item['loc']) or '(value)'}: {item['msg']}"
        for item in exc.errors()
    )
    return (
        f"invalid {exc.title}: {problems}; fix that value where it is set (a settings, profile "
        "or topology file, or a PARLEY_* variable)"
    )


def first_cause(exc: BaseException) -> BaseException:
    """The first failure inside a TaskGroup's group (or `exc` itself): what to explain."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def explain(
    command: str, exc: BaseException, refusals: Refusals | None = None, *, expected: bool = False
) -> tuple[str, int]:
    """What `exc`, escaped from `command`, means for the person and what to do next (one
    line), and the exit code. An `expected` error (one the command raises for persons to read)
    that no rule below explains better is its own message."""
    exc = first_cause(exc)
    refused = refusals.first() if refusals is not None else None
    if refused is not None and isinstance(exc, TimeoutError | nats.errors.Error):
        more = len(refusals.seen) - 1 if refusals is not None else 0
        return refusal_line(refused, more), EXIT_CONFIG
    if isinstance(exc, ServerUnreachable):
        return one_line(str(exc)), EXIT_UNREACHABLE
    if isinstance(exc, ConfigError | NatsServerError | ProvisionError):
        return one_line(str(exc)), EXIT_CONFIG
    if isinstance(exc, pydantic.ValidationError):
        return _invalid(exc), EXIT_CONFIG
    if isinstance(exc, msgspec.ValidationError | msgspec.DecodeError):
        return f"invalid input: {exc}; fix that field and try again", EXIT_CONFIG
    if isinstance(exc, nats.errors.NoServersError | ConnectionRefusedError):
        return f"no NATS server answers: {_UP_HINT}", EXIT_UNREACHABLE
    if isinstance(exc, nats.errors.ConnectionClosedError | nats.errors.ConnectionDrainingError):
        return f"the connection to NATS closed: {_UP_HINT}", EXIT_UNREACHABLE
    if isinstance(exc, TimeoutError):  # nats.errors.TimeoutError too (an OSError)
        return f"the server did not answer in time: {_slow_server_hint()}", EXIT_UNREACHABLE
    if isinstance(exc, nats.js.errors.NoStreamResponseError):
        return (
            "no stream stored what this command sent: the NATS server answers, but Parley's "
            f"system does not run on it: {_UP_HINT}",
            EXIT_UNREACHABLE,
        )
    if isinstance(exc, nats.js.errors.NotFoundError):
        return (
            f"the server has no such stream, bucket or consumer ({exc.description}): "
            "has the system been provisioned? (`parley up` provisions the local system)",
            EXIT_CONFIG,
        )
    if isinstance(exc, FileNotFoundError) and exc.filename is not None:
        return _missing(str(exc.filename)), EXIT_CONFIG
    if isinstance(exc, PermissionError) and exc.filename is not None:
        return f"may not open {exc.filename}: {exc.strerror}; check its owner and mode", EXIT_CONFIG
    if isinstance(exc, OSError) and exc.filename is not None and not isinstance(exc, TimeoutError):
        return f"{exc.strerror or exc}: {exc.filename}; check the path", EXIT_CONFIG
    if isinstance(exc, ConnectionError | socket.gaierror):  # not any OSError: epoll's too
        return f"network error ({exc.strerror or exc}): {_UP_HINT}", EXIT_UNREACHABLE
    if expected and str(exc):
        return one_line(str(exc)), EXIT_FAILED
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return f"{what}; run `parley --debug {command} …` for the traceback", EXIT_FAILED


@dataclass
class _Guard:
    """The running command's error handling: whether tracebacks are wanted, the broker's
    refusals so far, and whether one was said already (it is said once)."""

    debug: bool = False
    refusals: Refusals | None = None
    refusal_said: bool = False


_GUARD = _Guard()


def debug_traceback(exc: BaseException) -> None:
    """`exc`'s traceback on standard error, under `--debug` only."""
    if _GUARD.debug:
        traceback.print_exception(exc)


def report_failure(command: str, exc: BaseException, code: int | None = None) -> int:
    """Say what `exc` means in one line (its traceback first under `--debug`); return `code`,
    or the exit code `explain` gives it. For a command that handles its own errors. A server
    that does not answer exits 3 whatever `code` says (docs/cli.md's table)."""
    debug_traceback(exc)
    line, explained = explain(command, exc, _GUARD.refusals, expected=code is not None)
    if _GUARD.refusals is not None and _GUARD.refusals.first() is not None:
        _GUARD.refusal_said = _GUARD.refusal_said or line.startswith("the broker refused")
    print(f"parley {command}: {line}", file=sys.stderr, flush=True)
    unreachable = isinstance(first_cause(exc), ServerUnreachable)
    return explained if code is None or unreachable else code


def refused_so_far() -> str | None:
    """What the broker has refused the running command so far (a wait that may never end
    because of it says so, tools/_still_waiting.py), or None."""
    refusals = _GUARD.refusals
    refused = [] if refusals is None else [r for r in refusals.seen if not r.credentials_rejected]
    return refusal_line(refused[0], len(refused) - 1) if refused else None


def refusal_seen() -> asyncio.Event | None:
    """Set once the broker refused the running command a permission (None outside a command):
    a wait that rides through elections stops at it (`through_elections(stop=...)`)."""
    return None if _GUARD.refusals is None else _GUARD.refusals.refused


def run_guarded(command: str, run: Callable[[], int], *, debug: bool = False) -> int:
    """Run `command` and turn what escapes it into one line and an exit code; when it fails
    after the broker refused it something, say what was refused (once)."""
    refusals = Refusals().install()
    _GUARD.debug, _GUARD.refusals, _GUARD.refusal_said = debug, refusals, False
    try:
        code = run()
    except KeyboardInterrupt as exc:
        debug_traceback(exc)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if isinstance(first_cause(exc), BrokenPipeError):  # `parley … | head`: the reader left
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_FAILED  # nothing to say to a reader that has gone
        return report_failure(command, exc)
    finally:
        refusals.remove()
    # Rejected credentials are said where the command connects (tools/_local.py).
    refused = [each for each in refusals.seen if not each.credentials_rejected]
    if code != 0 and refused and not _GUARD.refusal_said:
        line = refusal_line(refused[0], len(refused) - 1)
        print(f"parley {command}: {line}", file=sys.stderr, flush=True)
    return code
