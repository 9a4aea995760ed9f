"""`parley mcp`: an MCP server that gives a person's own assistant Parley's agents.

    parley mcp                          # over stdio, for an assistant that starts it
    parley mcp --http 8765              # over streamable HTTP on 127.0.0.1:8765/mcp

The tools (`say`, `collab`, `delegate`, `session_status`, `stop_session`; tools/_mcp_tools.py)
act as the person whose credentials the command runs with, found exactly as `parley say`
finds them (tools/_local.py): `cli` under `parley up` in this directory (or `--dir`), or the
settings file given with `--config` (`.parley/broker/actors/person-alice.toml` acts as
alice). So the gate
applies that person's policy profile, rate limits and audit to every call an assistant makes,
and the broker shows it only that person's own sessions (tools/_mcp_person.py).

Over stdio, standard output carries the protocol alone; every line for a person goes to
standard error. Over HTTP, the server listens on loopback unless `--host` says otherwise, the
SDK refuses a Host or Origin header that is not loopback's (DNS rebinding), and every request
must carry `Authorization: Bearer <token>`: anyone on the machine can reach a loopback port,
and this one acts as the person. The token is read from `--token-file` (by default
`.parley/mcp-<principal>.token`), made there (readable by its owner alone) when missing.

Exit codes: 0 the assistant closed the connection (stdio) or the server was stopped (HTTP),
2 the configuration cannot work, 3 no NATS server answers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Final

from tools._waiting import run_command

__all__ = ("add_mcp_command",)

_LOOPBACK: Final = ("127.0.0.1", "localhost", "::1")


def _command(args: argparse.Namespace) -> int:
    http_only = [f for f, v in (("--host", args.host), ("--token-file", args.token_file)) if v]
    if args.http is None and http_only:  # over stdio they would be ignored, without a word
        verb = "apply" if len(http_only) > 1 else "applies"
        print(
            f"parley mcp: {' and '.join(http_only)} {verb} only with --http PORT (without it, "
            "the server speaks over stdio)",
            file=sys.stderr,
        )
        return 2
    if args.host is None:
        args.host = "127.0.0.1"
    if args.http is not None and not 0 <= args.http <= 65_535:
        print(
            f"parley mcp: --http {args.http} is no port: 0 (any free one) to 65535", file=sys.stderr
        )
        return 2
    if args.http is not None and args.host not in _LOOPBACK and not args.allow_remote:
        print(
            f"parley mcp: --host {args.host} is reachable from other machines: add "
            "--allow-remote to mean it (the bearer token is then all that stands in the way)",
            file=sys.stderr,
        )
        return 2
    from tools._mcp_serve import serve

    return run_command("mcp", lambda: serve(args))


def add_mcp_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `mcp` to the `parley` command."""
    mcp = commands.add_parser(
        "mcp", help="serve say, collab, delegate and session status to your own assistant (MCP)"
    )
    mcp.add_argument(
        "--dir",
        type=Path,
        help="the directory `parley up` runs in (default: this one); an assistant starts its "
        "servers in a directory of its own choosing",
    )
    mcp.add_argument("--config", type=Path, help="the person's settings file (default: cli's)")
    mcp.add_argument(
        "--http",
        type=int,
        metavar="PORT",
        help="serve streamable HTTP on this port (0: any free one) instead of stdio",
    )
    mcp.add_argument("--host", help="HTTP address (default 127.0.0.1; with --http only)")
    mcp.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host")
    mcp.add_argument(
        "--token-file",
        type=Path,
        help="HTTP bearer token file (default .parley/mcp-<principal>.token, made if missing)",
    )
    mcp.set_defaults(func=_command)
