"""The `parley` command line: one entry point, one small function per command."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from actors import ACTORS
from bus import (
    Actor,
    ConfigError,
    ExitCode,
    NatsServerError,
    ProvisionError,
    load_settings,
    run_actor,
)
from tools._errors import report_failure, run_guarded, wants_debug
from tools._up import up
from tools.a2a import add_a2a_command
from tools.approvals import add_approvals_command
from tools.artifacts import add_artifacts_commands
from tools.audit import add_audit_commands
from tools.calls import add_calls_command
from tools.chaos import add_chaos_command
from tools.collab import add_collab_commands
from tools.console import add_console_command
from tools.delegate import add_delegate_command
from tools.demo import add_demo_command
from tools.device import add_device_commands
from tools.mcp import add_mcp_command
from tools.natsconf import add_gateway_command, add_natsconf_commands
from tools.orchestrate import add_orchestrate_command
from tools.policy import add_policy_commands
from tools.provision import add_provision_command
from tools.schemagen import write_schemas
from tools.share import add_share_commands
from tools.storage import add_storage_command
from tools.tail import add_tail_command
from tools.task import add_task_command

__all__ = ("main", "resolve_actor")


def resolve_actor(name: str) -> type[Actor]:
    """An actor class from a registered kind (`echo`) or an import path (`pkg.mod:Class`).

    Raises:
        ConfigError: no such actor.
    """
    if name in ACTORS:
        return ACTORS[name]
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            candidate = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"cannot load actor {name!r}: {exc}") from None
        if isinstance(candidate, type) and issubclass(candidate, Actor):
            return candidate
        raise ConfigError(f"{name!r} is not an Actor subclass")
    known = ", ".join(sorted(ACTORS))
    raise ConfigError(f"unknown actor {name!r}; known actors: {known}, or give module:Class")


def _cmd_run(args: argparse.Namespace) -> int:
    try:
        actor_cls = resolve_actor(args.actor)
        settings = load_settings(
            args.config,
            actor_id=args.id,
            allow_lazy_fsync=True if args.allow_lazy_fsync else None,
        )
        if args.profile:  # an agent host's profile: a name in deploy/agents or a path
            options = {**settings.options, "profile": args.profile}
            settings = settings.model_copy(update={"options": options})
        actor = actor_cls(settings)
    except ConfigError as exc:
        return report_failure("run", exc, int(ExitCode.CONFIG))
    return run_actor(actor)


def _cmd_up(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(up(args))
    except (ConfigError, NatsServerError, ProvisionError) as exc:
        return report_failure("up", exc, int(ExitCode.CONFIG))


def _cmd_schemas(args: argparse.Namespace) -> int:
    stale = write_schemas(check_only=args.check)
    if stale and args.check:
        print("stale schema files: " + ", ".join(stale), file=sys.stderr)
        print("run `parley schemas` (or `make schemas`) and commit the result", file=sys.stderr)
        return 1
    for name in stale:
        print(f"wrote schemas/json/{name}")
    return 0


class _OneLineParser(argparse.ArgumentParser):
    """A parser whose errors are one line naming the command, as every other failure of
    `parley` is (docs/cli.md): argparse printed the whole usage of `parley` first, even for a
    subcommand's flag."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (`{self.prog} --help` lists what it takes)", file=sys.stderr)
        sys.exit(2)


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost subcommand's parser `args` were parsed by."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and action.dest in vars(args):
            chosen = action.choices.get(getattr(args, action.dest))
            if chosen is not None:
                return _chosen(chosen, args)
    return parser


def _intermixed(
    arguments: list[str],
    args: argparse.Namespace,
    chosen: argparse.ArgumentParser,
    extra: list[str],
) -> list[str]:
    """Parse a command that takes a list of words again, its words and options in any order,
    into `args`; what is left unparsed. argparse ends a list at the first option, so `parley
    delegate @coder --max-tokens 10 "…"` called the objective an unrecognized argument and
    `parley say @gpt --detach "…"` dropped `@gpt` for the words after the option (a
    newcomer's walk). A subcommand's own subcommands are left as they were parsed."""
    lists = [a for a in chosen._actions if not a.option_strings and a.nargs in ("*", "+")]
    if not lists or args.command not in arguments or chosen.prog.split()[-1] != args.command:
        return extra
    at = arguments.index(args.command)
    after, words = arguments[at + 1 :], []
    if "--" in after:  # words that look like options, as the person said
        if not extra:
            return extra  # the plain parse took them all
        # Intermixed parsing drops a `--` before the first word: what follows it is put on
        # the end of the command's list of words by hand (a review).
        after, words = after[: after.index("--")], after[after.index("--") + 1 :]
    parsed, unparsed = chosen.parse_known_intermixed_args(after)
    for name, value in vars(parsed).items():
        setattr(args, name, value)
    if words:
        dest = lists[-1].dest
        setattr(args, dest, [*(getattr(args, dest) or []), *words])
    return [word for word in extra if word in arguments[:at]] + unparsed


def _parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = _OneLineParser(prog="parley", description=__doc__)
    parser.add_argument(  # read by `wants_debug` before parsing; here for --help
        "--debug",
        action="store_true",
        help="print the traceback of an error, not only its one line (also PARLEY_DEBUG=1)",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run one actor in this process")
    run.add_argument("actor", help="actor kind (" + ", ".join(sorted(ACTORS)) + ") or module:Class")
    run.add_argument("--config", type=Path, help="TOML settings file")
    run.add_argument("--id", help="actor id (default: PARLEY_ACTOR_ID, else the kind)")
    run.add_argument(
        "--profile", help="agent profile, a name in deploy/agents or a TOML path (agent only)"
    )
    run.add_argument(
        "--allow-lazy-fsync",
        action="store_true",
        help="accept a server that does not fsync every write",
    )
    run.set_defaults(func=_cmd_run)

    up = commands.add_parser(
        "up", help="start the local system (or a topology) as supervised actor processes"
    )
    up.add_argument(
        "topology",
        nargs="?",
        type=Path,
        help="a topology TOML, or a directory with a system.toml (examples/<flow>); default: "
        "the local system (gate, router, auditor, every shipped agent, the tool runtime, the "
        "LLM gateway, console, demo policy)",
    )
    up.add_argument("--store", type=Path, help="embedded server's JetStream directory")
    up.add_argument(
        "--replace-policy",
        action="store_true",
        help="publish the system's bundle in place of whatever bundle is stored (one published "
        "with `parley policy publish` included)",
    )
    up.add_argument(
        "--open-broker",
        action="store_true",
        help="run the embedded server without users (any local process may publish anything)",
    )
    up.add_argument(
        "--cluster",
        type=int,
        choices=range(2, 8),
        metavar="N",
        help="run N embedded servers (2 to 7) as one JetStream cluster (streams at 3 replicas "
        "from 3); a cluster of one never elects a metadata leader",
    )
    up.set_defaults(func=_cmd_up)

    schemas = commands.add_parser("schemas", help="write schemas/json from the envelope Structs")
    schemas.add_argument("--check", action="store_true", help="only report stale files")
    schemas.set_defaults(func=_cmd_schemas)

    add_policy_commands(commands)
    add_collab_commands(commands)
    add_approvals_command(commands)
    add_orchestrate_command(commands)
    add_task_command(commands)
    add_delegate_command(commands)
    add_mcp_command(commands)
    add_demo_command(commands)
    add_chaos_command(commands)
    add_natsconf_commands(commands)
    add_gateway_command(commands)
    add_provision_command(commands)
    add_audit_commands(commands)
    add_tail_command(commands)
    add_artifacts_commands(commands)
    add_calls_command(commands)
    add_console_command(commands)
    add_a2a_command(commands)
    add_device_commands(commands)
    add_share_commands(commands)
    add_storage_command(commands)

    commands.add_parser("bench", help="benchmark Parley against raw nats-py (see --help)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` and run the command; return its exit code. Whatever escapes the command
    is one line on standard error (tools/_errors.py), with its traceback under `--debug`."""
    debug, arguments = wants_debug(list(sys.argv[1:] if argv is None else argv))
    if arguments[:1] == ["bench"]:  # its own parser owns every flag after the word
        from tools.bench import main as bench_main

        return run_guarded("bench", lambda: bench_main(arguments[1:]), debug=debug)
    parser = _parser()
    args, extra = parser.parse_known_args(arguments)
    extra = _intermixed(arguments, args, _chosen(parser, args), extra)
    if extra:  # named by the subcommand that did not take them, unless given before it
        at = arguments.index(args.command)
        before = any(word in arguments[:at] for word in extra)
        unknown = f"unrecognized arguments: {' '.join(extra)}"
        (parser if before else _chosen(parser, args)).error(unknown)
    command = " ".join(
        str(word) for word in (args.command, getattr(args, f"{args.command}_command", None)) if word
    )
    return run_guarded(command, lambda: int(args.func(args)), debug=debug)
