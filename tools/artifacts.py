"""`parley artifacts list|get`: the files the tool runtime stored for sessions.

Both read the namespace's artifact store as `artifacts-cli`, an operator's read-only role (its
credentials are written by `parley up` and `parley nats-config`): direct gets on the store's
stream and nothing else, never a consumer, never a write. `get` checks the bytes it read
against the URI's SHA-256 and size before it writes a byte of them, and writes a file through
a temporary sibling, so a file it leaves is always the artifact.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS

from actors.tools import ArtifactStore, ArtifactStoreError, ArtifactUri, BadArtifactUri
from bus import ConfigError, HistoryError, jetstream
from schemas import Namespace
from tools._command_connection import connect_local
from tools._errors import report_failure
from tools._local import local_settings
from tools.natsconf import ARTIFACT_READER

__all__ = ("add_artifacts_commands",)


async def _with_store(
    args: argparse.Namespace, tenant: str, use: Callable[[ArtifactStore], Awaitable[int]]
) -> int:
    settings = local_settings(args.config, ARTIFACT_READER, namespace=args.namespace)
    nc: NATS = await connect_local(settings, ARTIFACT_READER)
    try:
        store = ArtifactStore(jetstream(nc, settings), Namespace(settings.namespace), tenant)
        return await use(store)
    finally:
        await nc.close()


async def _list(args: argparse.Namespace) -> int:
    async def use(store: ArtifactStore) -> int:
        found = await store.list(args.session)
        for uri in found:
            print(f"{uri}\t{uri.size}\t{uri.name}")
        if not found:  # under a tenant given, say so: another tenant's may be there
            of = f" under tenant {args.tenant}" if args.tenant else ""
            print(f"parley artifacts: none stored for session {args.session}{of}", file=sys.stderr)
        return 0

    return await _with_store(args, args.tenant or "", use)


async def _get(args: argparse.Namespace) -> int:
    uri = ArtifactUri.parse(args.uri)

    async def use(store: ArtifactStore) -> int:
        data = await store.get(uri)
        if args.output is None:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
            return 0
        staging = args.output.with_name(f".{args.output.name}.parley-get")
        staging.write_bytes(data)
        os.replace(staging, args.output)
        print(f"wrote {uri.size} bytes (sha256 {uri.sha256}) to {args.output}", file=sys.stderr)
        return 0

    return await _with_store(args, uri.tenant, use)


def _runner(
    coro: Callable[[argparse.Namespace], Coroutine[Any, Any, int]],
) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return asyncio.run(coro(args))
        except (BadArtifactUri, ArtifactStoreError, ConfigError, HistoryError) as exc:
            return report_failure("artifacts", exc, 2)  # 3 when no server answers
        except KeyboardInterrupt:
            return 130

    return run


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="TOML settings file (NATS URL, namespace)")
    parser.add_argument("--namespace", help="subject root (default: settings, else parley)")


def add_artifacts_commands(commands: Any) -> None:
    """Add `artifacts list` and `artifacts get` to the `parley` command."""
    artifacts = commands.add_parser(
        "artifacts", help="list or get the files the tool runtime stored for sessions"
    )
    sub = artifacts.add_subparsers(dest="artifacts_command", required=True)
    listing = sub.add_parser("list", help="the artifacts of one session: URI, size, name")
    listing.add_argument("--session", required=True, help="the session id")
    listing.add_argument("--tenant", help="one tenant's only (default: every tenant's)")
    _common(listing)
    listing.set_defaults(func=_runner(_list))
    get = sub.add_parser("get", help="one artifact's bytes, checked against its URI")
    get.add_argument("uri", help="a parley-artifact:// URI (as `list` or a tool result gives)")
    get.add_argument("-o", "--output", type=Path, help="write to FILE (default: stdout)")
    _common(get)
    get.set_defaults(func=_runner(_get))
