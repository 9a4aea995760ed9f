"""`parley share` (the owner's side) and `parley shared` (the caller's side).

`parley share byte-doc --with DEVICE_PUB` writes a share record signed by this deployment's
device key: agent `byte-doc` may be reached by that device, as the principal
`device-<first 16 hex digits>` (the name the gate's policy must list, with `byte-doc` in its
`allowed_targets`), until it expires. `parley share --revoke SHARE_ID` re-signs it revoked:
the relay refuses the device's next frame. `parley shared add bob-byte-doc --agent byte-doc
--device DEVICE_PUB --gateway URL` records a remote agent under a local name (the name the
gate's `shared_agents` and the callers' `allowed_shared_device_ids` use). The relay reads both
from `.parley/relay` unless told (actors/relay/_shares.py says why files).

`resolve_shared` turns the owner/agent a person names (`parley orchestrate --shared
bob/byte-doc`) into that local name, from the same records.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec

from actors.relay import (
    DeviceKeyError,
    DeviceKeys,
    load_shared_agents,
    load_shares,
    read_share,
    save_shared_agent,
    share_path,
    write_share,
)
from schemas import SharedAgent, ShareRecord, device_principal, new_id, parse_device_pub
from tools._local import LOCAL_DIR
from tools.device import DEFAULT_DEVICE_DIR

__all__ = ("DEFAULT_RELAY_DIR", "UnknownSharedAgent", "add_share_commands", "resolve_shared")

DEFAULT_RELAY_DIR = LOCAL_DIR / "relay"
_RELAY_DIR_HELP = "the relay's shares and shared agents (default: %(default)s)"


_MIN_DEVICE_PREFIX = 8


class UnknownSharedAgent(ValueError):
    """`owner/agent` names no shared agent this deployment added, or more than one."""


def resolve_shared(spec: str, relay_dir: Path) -> str:
    """The local name of the shared agent `spec` names.

    A bare name is a local name already. `owner/agent` is the agent `agent` of the owner
    `owner`: the shared agent added (`parley shared add`) with that remote agent name and
    either the local name `owner-agent` (the convention `bob-byte-doc` follows) or a device
    id starting with `owner` (at least 8 hex digits). The owner's name is not in the signed
    records, so the local name is the only place a person's name for the owner lives; a
    device prefix always works. Nothing found, or two found, is an `UnknownSharedAgent`
    that lists what this deployment has.
    """
    if "/" not in spec:
        return spec
    owner, _, agent = spec.rpartition("/")
    known = load_shared_agents(relay_dir)
    owner_is_device = len(owner) >= _MIN_DEVICE_PREFIX
    found = [
        shared
        for shared in known
        if shared.agent == agent
        and (
            shared.name == f"{owner}-{agent}"
            or (owner_is_device and shared.device.device_id.startswith(owner.lower()))
        )
    ]
    if len(found) == 1:
        return found[0].name
    listed = (
        ", ".join(f"{s.name} ({s.agent} on {s.device.device_id[:16]}…)" for s in known) or "none"
    )
    if found:
        raise UnknownSharedAgent(
            f"{spec} names {len(found)} shared agents ({', '.join(s.name for s in found)}): "
            "give the local name instead"
        )
    raise UnknownSharedAgent(
        f"no shared agent {spec} in {relay_dir}: add it with `parley shared add {owner}-{agent}"
        f" --agent {agent} --device DEVICE_PUB` (shared agents here: {listed})"
    )


def _keys(directory: Path) -> DeviceKeys | None:
    try:
        return DeviceKeys.load(directory)
    except DeviceKeyError as exc:
        print(f"parley share: {exc}", file=sys.stderr)
        return None


def _share(args: argparse.Namespace) -> int:
    keys = _keys(args.device_dir)
    if keys is None:
        return 2
    if args.list:
        for share in load_shares(args.relay_dir, keys.device_id):
            state = "revoked" if share.revoked_at else f"until {share.expires_at:%Y-%m-%d %H:%M}"
            print(f"{share.share_id}  {share.agent} -> {share.principal}  {state}")
        return 0
    if args.revoke:
        path = share_path(args.relay_dir, args.revoke)
        try:
            share = read_share(path, keys.device_id)
        except (OSError, ValueError) as exc:
            print(
                f"parley share: no share {args.revoke} signed by this device: {exc}",
                file=sys.stderr,
            )
            return 1
        revoked = msgspec.structs.replace(share, revoked_at=datetime.now(UTC))
        write_share(args.relay_dir, revoked, keys.signing)
        print(f"revoked {share.share_id} ({share.agent} for {share.principal})")
        return 0
    if not args.agent or not args.with_device:
        print(
            "parley share: give AGENT and --with DEVICE_PUB (or --revoke/--list)", file=sys.stderr
        )
        return 2
    try:
        device = parse_device_pub(args.with_device)
    except ValueError as exc:
        print(f"parley share: {exc}", file=sys.stderr)
        return 2
    now = datetime.now(UTC)
    share = ShareRecord(
        share_id=new_id(),
        agent=args.agent,
        device=device,
        principal=args.principal or device_principal(device.device_id),
        owner_device=keys.device_id,
        created_at=now,
        expires_at=now + timedelta(days=args.days),
    )
    path = write_share(args.relay_dir, share, keys.signing)
    print(f"share id:   {share.share_id}")
    print(f"principal:  {share.principal} (give it {args.agent} in allowed_targets)")
    print(f"your device: {keys.public}")
    print(f"written:    {path}")
    return 0


def _shared_add(args: argparse.Namespace) -> int:
    try:
        device = parse_device_pub(args.device)
        shared = SharedAgent(
            name=args.name,
            agent=args.agent,
            device=device,
            gateway_url=args.gateway,
            added_at=datetime.now(UTC),
        )
        shared = msgspec.convert(msgspec.to_builtins(shared), SharedAgent)  # checks the names
    except (ValueError, msgspec.ValidationError) as exc:
        print(f"parley shared add: {exc}", file=sys.stderr)
        return 2
    path = save_shared_agent(args.relay_dir, shared)
    print(f"added {shared.name} ({shared.agent} on device {device.device_id[:16]}…): {path}")
    print(
        f"list it in the policy's shared_agents (and shared_agent_devices: "
        f"{shared.name} = {device.device_id!r}) and the callers' allowed_shared_device_ids"
    )
    return 0


def _shared_list(args: argparse.Namespace) -> int:
    found = load_shared_agents(args.relay_dir)
    for shared in found:
        print(
            f"{shared.name}  {shared.agent}@{shared.device.device_id[:16]}…  {shared.gateway_url}"
        )
    if not found:  # said on standard error: the listing itself stays empty for a script
        print(
            f"parley shared: no remote agents in {args.relay_dir}; add one with "
            "`parley shared add NAME --agent AGENT --device DEVICE_PUB`",
            file=sys.stderr,
        )
    return 0


def add_share_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `parley share` and `parley shared …` on the main parser."""
    share = commands.add_parser("share", help="share an agent with a device, or revoke it")
    share.add_argument("agent", nargs="?", help="the agent to share (this deployment's name)")
    share.add_argument("--with", dest="with_device", help="the device's public id")
    share.add_argument("--principal", help="who its calls arrive as (default device-<id>)")
    share.add_argument("--days", type=float, default=90.0, help="until it expires (90)")
    share.add_argument("--revoke", metavar="SHARE_ID", help="revoke a share")
    share.add_argument("--list", action="store_true", help="list this device's shares")
    share.add_argument(
        "--device-dir",
        type=Path,
        default=DEFAULT_DEVICE_DIR,
        help="this device's keys, which sign the share (default: %(default)s)",
    )
    share.add_argument("--relay-dir", type=Path, default=DEFAULT_RELAY_DIR, help=_RELAY_DIR_HELP)
    share.set_defaults(func=_share)

    shared = commands.add_parser("shared", help="remote agents this deployment may call")
    sub = shared.add_subparsers(dest="shared_command", required=True)
    add = sub.add_parser("add", help="record a remote agent under a local name")
    add.add_argument("name", help="the local name (e.g. bob-byte-doc)")
    add.add_argument("--agent", required=True, help="its name in the owner's deployment")
    add.add_argument("--device", required=True, help="the owner's device public id")
    add.add_argument("--gateway", default="", help="the gateway's URL")
    add.add_argument("--relay-dir", type=Path, default=DEFAULT_RELAY_DIR, help=_RELAY_DIR_HELP)
    add.set_defaults(func=_shared_add)
    listing = sub.add_parser("list", help="list the remote agents")
    listing.add_argument("--relay-dir", type=Path, default=DEFAULT_RELAY_DIR, help=_RELAY_DIR_HELP)
    listing.set_defaults(func=_shared_list)
