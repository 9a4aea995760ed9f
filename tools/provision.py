"""`parley provision`: create or update the streams and buckets, as the only user allowed to.

Under the least-privilege broker config (deploy/nats/) actors run with `provision = false` and
cannot create, update, purge or delete streams, so an operator provisions once, with the
provisioner's credentials, before the actors start (and again after changing a definition).
Actors create their own durable consumers when they start: each may create only its own.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from nats.errors import Error as NatsError

from bus import (
    BUCKETS,
    ConfigError,
    ExitCode,
    ProvisionError,
    connect,
    load_settings,
    provision,
    stream_configs,
)
from schemas import Namespace

__all__ = ("add_provision_command", "provision_once")


async def provision_once(config: Path | None, nats_url: str | None = None) -> str:
    """Provision the namespace of the settings in `config`; return what now exists.

    `nats_url` overrides the settings' server (which otherwise come from `NATS_URL`).

    Raises:
        ConfigError: the settings are invalid.
        ProvisionError: JetStream refused a definition.
        OSError, nats.errors.Error: the server cannot be reached or did not answer.
    """
    settings = load_settings(config, nats_url=nats_url)
    actor_id = settings.actor_id or "provisioner"
    ns = Namespace(settings.namespace)
    nc = await connect(settings, actor_id, reconnect_forever=False)
    try:
        await provision(nc.jetstream(), ns, max_msg_size=settings.max_payload)
    finally:
        await nc.close()
    streams = ", ".join(c.name or "" for c in stream_configs(ns))
    buckets = ", ".join(ns.bucket(spec.name) for spec in BUCKETS)
    return f"provisioned namespace {ns.root}: streams {streams}; buckets {buckets}"


def _cmd_provision(args: argparse.Namespace) -> int:
    try:
        print(asyncio.run(provision_once(args.config)))
    except ConfigError as exc:
        print(f"parley provision: {exc}", file=sys.stderr)
        return int(ExitCode.CONFIG)
    except (ProvisionError, OSError, NatsError, TimeoutError) as exc:
        print(f"parley provision: {exc!r}", file=sys.stderr)
        return int(ExitCode.UNAVAILABLE)
    return 0


def add_provision_command(commands: Any) -> None:
    """Register `parley provision` on the CLI's subcommands."""
    cmd = commands.add_parser(
        "provision", help="create or update streams and buckets (the provisioner's job)"
    )
    cmd.add_argument(
        "--config", type=Path, help="settings TOML (e.g. the provisioner's from nats-config)"
    )
    cmd.set_defaults(func=_cmd_provision)
