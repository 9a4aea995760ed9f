"""What `parley mcp` runs once its command line is read (tools/mcp.py): the person's link,
the MCP server over stdio or over HTTP behind a bearer token.

Apart from the command's table entry so that no other `parley` command imports the MCP SDK
and the web server (uvicorn, starlette): every process pays for what `tools.cli` imports.
"""

from __future__ import annotations

import argparse
import hmac
import os
import secrets
import socket
import stat
import sys
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from bus import ConfigError
from tools._local import LOCAL_DIR, PERSON, local_settings
from tools._mcp_person import McpPerson
from tools._mcp_tools import build_server

__all__ = ("bearer_guard", "serve", "token_of")


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
        # Opened once, never through a link, and checked by its descriptor: a name swapped
        # for a link between a check and a read would pass the check (a review).
        # Not blocking either: a FIFO put there would hang the start (a review).
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(descriptor) as file:
            _check_own(path, os.fstat(file.fileno()))
            token = file.read().strip()
    except OSError as exc:
        raise ConfigError(f"cannot use the token file {path}: {exc.strerror or exc}") from None
    if not token:
        raise ConfigError(f"the token file {path} is empty: delete it to have one made")
    if len(token) < _SHORTEST_TOKEN:
        raise ConfigError(
            f"the token in {path} has {len(token)} characters, fewer than {_SHORTEST_TOKEN}: "
            "delete the file to have a strong one made"
        )
    return token


_SHORTEST_TOKEN = 32
"""A token the file may hold: one made here has 43 characters (32 random bytes)."""


def _check_own(path: Path, status: os.stat_result) -> None:
    """A token file someone else could have written, or can read, names a token they know
    (an attack review: one under /tmp, made by another local user, was trusted as it was).

    Raises:
        ConfigError: it is not this user's own, or others may read or write it.
    """
    if not stat.S_ISREG(status.st_mode):
        raise ConfigError(f"the token file {path} is not a regular file: not used")
    if status.st_uid != os.getuid():
        raise ConfigError(f"the token file {path} is not yours (uid {status.st_uid}): not used")
    if status.st_mode & 0o077:
        raise ConfigError(
            f"the token file {path} may be read or written by others (mode "
            f"{status.st_mode & 0o777:o}): `chmod 600` it, or delete it to have one made"
        )


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


async def serve(args: argparse.Namespace) -> int:
    if args.dir is not None:  # an assistant starts its servers wherever it likes
        try:
            os.chdir(args.dir)
        except OSError as exc:
            raise ConfigError(f"cannot work in --dir {args.dir}: {exc.strerror}") from None
    settings = local_settings(args.config, PERSON)
    principal = settings.actor_id or PERSON  # one person, one principal (its own settings)
    person = McpPerson(settings, principal)
    await person.open()  # first: a token is made only for a server that can serve
    try:
        token = None
        if args.http is not None:
            token = token_of(args.token_file or LOCAL_DIR / f"mcp-{principal}.token")
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
