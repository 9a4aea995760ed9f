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
import hmac
import os
import secrets
import socket
import sys
from pathlib import Path
from typing import Final

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from bus import ConfigError
from tools._local import LOCAL_DIR, PERSON, local_settings
from tools._mcp_person import McpPerson
from tools._mcp_tools import build_server
from tools._waiting import run_command

__all__ = ("add_mcp_command", "bearer_guard", "token_of")

_LOOPBACK: Final = ("127.0.0.1", "localhost", "::1")


def token_of(path: Path) -> str:
    """The bearer token in `path`, made (owner-only) when the file does not exist yet.

    Raises:
        ConfigError: the file cannot be read or written, or holds no token.
    """
    try:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as out:
                out.write(secrets.token_urlsafe(32) + "\n")
        token = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"cannot use the token file {path}: {exc.strerror or exc}") from None
    if not token:
        raise ConfigError(f"the token file {path} is empty: delete it to have one made")
    return token


def bearer_guard(app: ASGIApp, token: str) -> ASGIApp:
    """`app` behind `Authorization: Bearer <token>`: any other HTTP request is a 401."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers", ())).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                headers = [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                body = b"parley mcp: send Authorization: Bearer <the token in its token file>\n"
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


async def _serve(args: argparse.Namespace) -> int:
    if args.dir is not None:  # an assistant starts its servers wherever it likes
        try:
            os.chdir(args.dir)
        except OSError as exc:
            raise ConfigError(f"cannot work in --dir {args.dir}: {exc.strerror}") from None
    settings = local_settings(args.config, PERSON)
    principal = settings.actor_id or PERSON  # one person, one principal (its own settings)
    token = None
    if args.http is not None:
        token = token_of(args.token_file or LOCAL_DIR / f"mcp-{principal}.token")
    person = McpPerson(settings, principal)
    await person.open()
    try:
        server = build_server(person)
        if args.http is None:
            _say(f"serving {principal}'s tools over stdio (nats at {settings.nats_url})")
            await server.run_stdio_async()
            return 0
        assert token is not None  # noqa: S101 - made above for --http
        listener = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((args.host, args.http))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {args.host}:{args.http}: {exc.strerror}") from None
        listener.listen()
        app = server.streamable_http_app(host=args.host)
        config = uvicorn.Config(bearer_guard(app, token), log_level="warning", lifespan="on")
        port = listener.getsockname()[1]
        host = f"[{args.host}]" if ":" in args.host else args.host
        where = args.token_file or LOCAL_DIR / f"mcp-{principal}.token"
        _say(f"serving {principal}'s tools at http://{host}:{port}/mcp (bearer token in {where})")
        await uvicorn.Server(config).serve(sockets=[listener])
        return 0
    finally:
        await person.close()


def _say(line: str) -> None:
    """A line for the person: standard error, as standard output may be the protocol's."""
    print(f"parley mcp: {line}", file=sys.stderr, flush=True)


def _command(args: argparse.Namespace) -> int:
    if args.http is not None and args.host not in _LOOPBACK and not args.allow_remote:
        print(
            f"parley mcp: --host {args.host} is reachable from other machines: add "
            "--allow-remote to mean it (the bearer token is then all that stands in the way)",
            file=sys.stderr,
        )
        return 2
    return run_command("mcp", lambda: _serve(args))


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
    mcp.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1)")
    mcp.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host")
    mcp.add_argument(
        "--token-file",
        type=Path,
        help="HTTP bearer token file (default .parley/mcp-<principal>.token, made if missing)",
    )
    mcp.set_defaults(func=_command)
