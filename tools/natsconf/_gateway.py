"""`parley gateway-config`: the gateway nats-server's users, one per relay's device.

The gateway is the untrusted common ground of two deployments' relays (actors/relay/). It
carries only sealed frames, yet each relay is still a user allowed only its own subjects:
it publishes frames *from* its device (`<root>.*.<own id>`), reads through one durable of its
own the frames *to* its device (`<root>.<own id>.*`), and may look the stream up; it may not
create, change or delete streams, read other devices' frames or publish in another device's
name. The gateway's operator creates the stream (`--create-stream` here, or the first relay
on an open gateway). Device ids are the devices' Ed25519 keys in hex (`parley device show
--device-id`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NATS
from nats.js.errors import NotFoundError

from actors.relay import gateway_stream
from tools.natsconf._command import new_user_seed, public_key

__all__ = (
    "GATEWAY_ADMIN",
    "add_gateway_command",
    "connect_gateway_operator",
    "create_gateway_stream",
    "gateway_permissions",
    "write_gateway_config",
)

GATEWAY_ADMIN = "admin"
"""The gateway operator's user: may create and look up the one stream and watch the frames go
by (what the operator holds on disk anyway), nothing else: it publishes no frame, reads no
relay's durable and deletes nothing."""

_JS = "$JS.API"


def gateway_permissions(device_id: str, root: str) -> dict[str, object]:
    """One relay's permissions on the gateway (names as actors/relay/_gateway.py uses them)."""
    if len(device_id) != 64 or any(c not in "0123456789abcdef" for c in device_id):
        raise ValueError(f"not a device id (64 lowercase hex digits): {device_id!r}")
    stream = root.upper().replace("-", "_")
    durable = f"relay-{device_id[:16]}"
    inbox = f"_INBOX_{device_id[:16]}"
    return {
        "publish": {
            "allow": [
                f"{root}.*.{device_id}",
                f"{_JS}.STREAM.INFO.{stream}",
                f"{_JS}.CONSUMER.CREATE.{stream}.{durable}.{root}.{device_id}.*",
                f"{_JS}.CONSUMER.INFO.{stream}.{durable}",
                f"{_JS}.CONSUMER.MSG.NEXT.{stream}.{durable}",
                f"$JS.ACK.{stream}.{durable}.>",
            ]
        },
        "subscribe": {"allow": [f"{inbox}.>"], "deny": ["_INBOX.>"]},
    }


def _admin_permissions(root: str) -> dict[str, object]:
    stream = root.upper().replace("-", "_")
    return {
        "publish": {
            "allow": [f"{_JS}.STREAM.CREATE.{stream}", f"{_JS}.STREAM.INFO.{stream}"],
        },
        "subscribe": {"allow": ["_INBOX_gwadmin.>", f"{root}.>"], "deny": ["_INBOX.>"]},
    }


def _seed(seeds: Path, name: str) -> tuple[bytes, Path]:
    path = seeds / f"{name}.nk"
    if path.is_file():
        return path.read_bytes().strip(), path.resolve()
    seed = new_user_seed()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(seed + b"\n")
    return seed, path.resolve()


def write_gateway_config(
    out: Path, devices: Sequence[str], root: str = "parleygw"
) -> dict[str, Path]:
    """Write `authorization.conf` (one nkey user per device, and the operator's `admin`) and
    their seeds into `out`; return device id (or `admin`) -> seed file (a relay's
    `gateway_nkey_seed_file`). Seeds already there are kept."""
    out.mkdir(parents=True, exist_ok=True)
    seeds = out / "seeds"
    seeds.mkdir(mode=0o700, exist_ok=True)
    users: list[dict[str, object]] = []
    files: dict[str, Path] = {}
    for device in devices:
        permissions = gateway_permissions(device, root)
        seed, files[device] = _seed(seeds, device[:16])
        users.append({"nkey": public_key(seed), "permissions": permissions})
    seed, files[GATEWAY_ADMIN] = _seed(seeds, GATEWAY_ADMIN)
    users.append({"nkey": public_key(seed), "permissions": _admin_permissions(root)})
    header = "# The gateway's users, one per relay device (parley gateway-config).\n"
    body = json.dumps({"authorization": {"users": users}}, indent=2)
    (out / "authorization.conf").write_text(header + body + "\n")
    return files


async def connect_gateway_operator(url: str, admin_seed: Path) -> NATS:
    """A connection to the gateway as its operator (`GATEWAY_ADMIN`)."""
    return await nats.connect(url, nkeys_seed=str(admin_seed), inbox_prefix=b"_INBOX_gwadmin")


async def create_gateway_stream(url: str, admin_seed: Path, root: str = "parleygw") -> None:
    """Create the gateway's stream as its operator (idempotent)."""
    nc = await connect_gateway_operator(url, admin_seed)
    try:
        js = nc.jetstream()
        try:
            await js.stream_info(gateway_stream(root).name or "")
        except NotFoundError:
            await js.add_stream(gateway_stream(root))
    finally:
        await nc.close()


def _cmd_gateway_config(args: argparse.Namespace) -> int:
    devices = [d.strip().split(".")[0] for d in args.devices.split(",") if d.strip()]
    try:
        files = write_gateway_config(args.out, devices, args.root)
    except (ValueError, OSError) as exc:
        print(f"parley gateway-config: {exc}", file=sys.stderr)
        return 2
    for name, path in files.items():
        print(f"{name[:16]:<16}  {path}")
    print(f"include {args.out / 'authorization.conf'} in the gateway's nats-server config")
    if args.create_stream:
        asyncio.run(create_gateway_stream(args.create_stream, files[GATEWAY_ADMIN], args.root))
        print(f"stream {gateway_stream(args.root).name} ready on {args.create_stream}")
    return 0


def add_gateway_command(commands: Any) -> None:
    """Register `parley gateway-config` on the CLI's subcommands."""
    cmd = commands.add_parser(
        "gateway-config", help="the gateway nats-server's users: one per relay device"
    )
    cmd.add_argument("--out", type=Path, required=True, help="directory to write into")
    cmd.add_argument("--devices", required=True, help="comma-separated device ids")
    cmd.add_argument("--root", default="parleygw", help="the relays' gateway_root")
    cmd.add_argument(
        "--create-stream", metavar="URL", help="then create the stream on this running gateway"
    )
    cmd.set_defaults(func=_cmd_gateway_config)
