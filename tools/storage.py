"""`parley storage`: what each stream and bucket holds against its quota (docs/quotas.md).

Reads stream info as the provisioner (the operator role allowed to look at every stream), with
the credentials `parley up` wrote for the local system, or `--config` for a deployment. One
line per stream and bucket, each agent's own buckets (its waits) among them: bytes held,
messages, the `max_bytes` it may hold and how full it is, then the core account's use against
its JetStream limit. A stream near 100% is one whose
writers will soon be refused (or, for PARLEY_EVENTS and PARLEY_DEAD, lose their oldest).
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.api import StreamInfo
from nats.js.errors import NotFoundError

from bus import (
    AGENT_BUCKETS,
    ARTIFACTS,
    BUCKETS,
    STREAM_FAMILIES,
    ConfigError,
    ExitCode,
    jetstream,
)
from schemas import Namespace
from tools._command_connection import connect_local
from tools._errors import report_failure
from tools._local import local_settings
from tools.natsconf import PROVISIONER

__all__ = ("Usage", "add_storage_command", "read_usage", "render_usage")


@dataclass(frozen=True, slots=True)
class Usage:
    """One stream's or bucket's use of its quota."""

    name: str
    bytes: int
    messages: int
    limit: int | None
    """Its `max_bytes`; None when it has none (a stream made before quotas)."""

    @property
    def percent(self) -> float | None:
        return None if not self.limit else 100.0 * self.bytes / self.limit


def _usage(info: StreamInfo) -> Usage:
    limit = info.config.max_bytes
    held = limit if limit and limit > 0 else None
    return Usage(info.config.name or "", info.state.bytes, info.state.messages, held)


async def read_usage(js: JetStreamContext, ns: Namespace) -> list[Usage]:
    """Every stream and bucket of namespace `ns` that exists, with its use and limit, then
    every agent's own buckets and reminders stream, by name."""
    names = [ns.stream(family) for family in STREAM_FAMILIES]
    names += [f"KV_{ns.bucket(spec.name)}" for spec in BUCKETS]
    names.append(f"OBJ_{ns.bucket(ARTIFACTS)}")  # the artifacts' object store
    found = []
    for name in names:
        try:
            found.append(_usage(await js.stream_info(name)))
        except NotFoundError:
            continue
    return found + sorted(await _agent_buckets(js, ns), key=lambda usage: usage.name)


async def _agent_buckets(js: JetStreamContext, ns: Namespace) -> list[Usage]:
    """Each agent's own buckets and reminders stream, whichever agents made them: found in the
    stream list (which says every stream's state at once) by their names, `KV_<bucket>_<agent>`
    and `<PREFIX>_TIMERS_<agent>`."""
    prefixes = (
        *(f"KV_{ns.bucket(spec.name)}_" for spec in AGENT_BUCKETS),
        f"{ns.stream('timers')}_",
    )
    found: list[Usage] = []
    offset = 0
    while page := await js.streams_info(offset) or []:
        found += [_usage(info) for info in page if (info.config.name or "").startswith(prefixes)]
        offset += len(page)
    return found


def _size(value: int | None) -> str:
    if value is None:
        return "none"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def render_usage(usage: list[Usage], account: Any | None = None) -> str:
    """The table `parley storage` prints, and the account's line when known."""
    wide = max([24, *(len(item.name) for item in usage)])  # an agent's bucket names run long
    lines = [f"{'stream':<{wide}} {'bytes':>11} {'messages':>9} {'limit':>11} {'used':>6}"]
    for item in usage:
        percent = "-" if item.percent is None else f"{item.percent:.1f}%"
        lines.append(
            f"{item.name:<{wide}} {_size(item.bytes):>11} {item.messages:>9} "
            f"{_size(item.limit):>11} {percent:>6}"
        )
    if account is not None:
        limit = account.limits.max_storage
        shown = _size(limit) if limit and limit > 0 else "none"
        lines.append(
            f"account: {_size(account.storage)} stored of {shown}, "
            f"{account.streams} streams, {account.consumers} consumers"
        )
    return "\n".join(lines)


async def _storage(config: Path | None) -> str:
    settings = local_settings(config, PROVISIONER)
    nc = await connect_local(settings, settings.actor_id or PROVISIONER)
    try:
        js = jetstream(nc, settings)
        usage = await read_usage(js, Namespace(settings.namespace))
        try:
            account = await js.account_info()
        except NatsError:
            account = None
    finally:
        await nc.close()
    if not usage:
        return f"no streams of namespace {settings.namespace}: run `parley provision` first"
    return render_usage(usage, account)


def _cmd_storage(args: argparse.Namespace) -> int:
    try:
        print(asyncio.run(_storage(args.config)))
    except ConfigError as exc:
        return report_failure("storage", exc, int(ExitCode.CONFIG))
    except (NatsError, OSError, TimeoutError) as exc:
        return report_failure("storage", exc, int(ExitCode.UNAVAILABLE))
    return 0


def add_storage_command(commands: Any) -> None:
    """Register `parley storage` on the CLI's subcommands."""
    cmd = commands.add_parser(
        "storage", help="storage use per stream and bucket against its quota (docs/quotas.md)"
    )
    cmd.add_argument(
        "--config",
        type=Path,
        help="the provisioner's settings TOML (default: the one `parley up` wrote here)",
    )
    cmd.set_defaults(func=_cmd_storage)
