"""`parley device init|show`: this deployment's device identity for shared agents.

A device is two key pairs (Ed25519 to sign frames and shares, X25519 to be encrypted to),
written owner-only under the deployment's directory (`.parley/device` unless told). What
`init` and `show` print, `<ed25519 hex>.<x25519 hex>`, is the device's public id: the one
string an owner needs to share an agent with this device (`parley share … --with`) or to add
this device's agent (`parley shared add … --device`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from actors.relay import DeviceKeyError, DeviceKeys
from tools._local import LOCAL_DIR

__all__ = ("DEFAULT_DEVICE_DIR", "add_device_commands")

DEFAULT_DEVICE_DIR = LOCAL_DIR / "device"


def _init(args: argparse.Namespace) -> int:
    keys = DeviceKeys.generate()
    try:
        keys.save(args.dir, overwrite=args.force)
    except DeviceKeyError as exc:
        print(f"parley device init: {exc} (use --force to replace them)", file=sys.stderr)
        return 2  # a configuration to fix, as `parley share` says of missing keys
    print(f"device id:  {keys.device_id}")
    print(f"public id:  {keys.public}")
    print(f"keys:       {args.dir} (owner-only)")
    return 0


def _show(args: argparse.Namespace) -> int:
    try:
        keys = DeviceKeys.load(args.dir)
    except DeviceKeyError as exc:
        print(f"parley device show: {exc}", file=sys.stderr)
        return 2
    if args.device_id:  # for the gateway's users and the bundle's device lists
        print(keys.device_id)
        return 0
    # The public id alone on standard output, for `share --with "$(parley device show)"` on
    # the other side (a walk had to cut it out of two labelled lines); the rest is for eyes.
    print(f"device id {keys.device_id}; its public id, to give the other side:", file=sys.stderr)
    print(keys.public)
    return 0


def add_device_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `parley device …` on the main parser."""
    device = commands.add_parser("device", help="this deployment's device keys (shared agents)")
    sub = device.add_subparsers(dest="device_command", required=True)
    init = sub.add_parser("init", help="generate the device's Ed25519 and X25519 key pairs")
    init.add_argument(
        "--dir",
        type=Path,
        default=DEFAULT_DEVICE_DIR,
        help="where the keys go (default: %(default)s)",
    )
    init.add_argument("--force", action="store_true", help="replace existing keys")
    init.set_defaults(func=_init)
    show = sub.add_parser("show", help="print the device's public id")
    show.add_argument(
        "--device-id",
        action="store_true",
        help="print the device id (its Ed25519 key in hex) instead: what `gateway-config "
        "--devices` and a bundle's device lists name",
    )
    show.add_argument(
        "--dir",
        type=Path,
        default=DEFAULT_DEVICE_DIR,
        help="where the keys are (default: %(default)s)",
    )
    show.set_defaults(func=_show)
