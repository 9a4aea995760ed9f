"""Shares and shared agents, kept as files in the deployment's relay directory.

Files rather than a KV bucket: both are configuration an owner writes on their own machine
with `parley share` and `parley shared add`, and only the relay reads them. On the broker they
would need a principal for the tools with write access to a bucket the relay trusts; as files
they need none, and a share is signed by the owner's device key anyway, so the relay refuses a
share it did not sign whoever could write the directory. The relay reads the shares again for
every incoming call, so a revocation takes effect on the next frame without a restart.

Layout: `<dir>/shares/<share id>.json` (DSSE envelope of a `ShareRecord`) and
`<dir>/shared/<local name>.json` (a `SharedAgent`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from actors.relay._keys import ed25519_from_id
from schemas import (
    SHARE_PAYLOAD_TYPE,
    DsseError,
    SharedAgent,
    ShareRecord,
    key_id,
    sign_payload,
    verify_payload,
)

__all__ = (
    "ShareRefused",
    "find_share",
    "load_shared_agents",
    "load_shares",
    "read_share",
    "save_shared_agent",
    "share_path",
    "write_share",
)

_share_decoder = msgspec.json.Decoder(ShareRecord)
_shared_decoder = msgspec.json.Decoder(SharedAgent)


class ShareRefused(ValueError):
    """No share lets this device reach this agent now. `reason`: `missing`, `revoked`,
    `expired`."""

    def __init__(self, reason: str, message: str, share: ShareRecord | None = None) -> None:
        super().__init__(message)
        self.reason = f"share_{reason}"
        self.share = share
        """The revoked or expired share, whose device can be told (a missing one cannot)."""


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    tmp.replace(path)  # atomic: the relay never reads half a record


def share_path(directory: Path, share_id: str) -> Path:
    return directory / "shares" / f"{share_id}.json"


def write_share(directory: Path, share: ShareRecord, owner_key: Ed25519PrivateKey) -> Path:
    """Sign `share` with the owner's device key and store it."""
    signed = sign_payload(msgspec.json.encode(share), SHARE_PAYLOAD_TYPE, owner_key)
    path = share_path(directory, share.share_id)
    _write_private(path, signed)
    return path


def read_share(path: Path, owner_device: str) -> ShareRecord:
    """One share, verified against the owner's device key before it is decoded."""
    owner = ed25519_from_id(owner_device)
    payload, _ = verify_payload(path.read_bytes(), SHARE_PAYLOAD_TYPE, {key_id(owner): owner})
    share = _share_decoder.decode(payload)
    if share.owner_device != owner_device:
        raise DsseError("unknown_key", f"{path.name} names another owner device")
    return share


def load_shares(directory: Path, owner_device: str) -> list[ShareRecord]:
    """Every share the owner signed; a file that does not verify is skipped, never trusted."""
    shares = []
    for path in sorted((directory / "shares").glob("*.json")):
        try:
            shares.append(read_share(path, owner_device))
        except (OSError, DsseError, msgspec.DecodeError, ValueError):
            continue
    return shares


def find_share(
    shares: Sequence[ShareRecord], device_id: str, agent: str, now: datetime
) -> ShareRecord:
    """The share that lets `device_id` reach `agent` at `now`, else `ShareRefused`."""
    matching = [s for s in shares if s.device.device_id == device_id and s.agent == agent]
    if not matching:
        raise ShareRefused("missing", f"no share of {agent} with device {device_id[:16]}…")
    live = [s for s in matching if s.revoked_at is None]
    if not live:
        raise ShareRefused(
            "revoked",
            f"the share of {agent} with device {device_id[:16]}… was revoked",
            matching[0],
        )
    current = [s for s in live if s.expires_at > now]
    if not current:
        raise ShareRefused(
            "expired", f"the share of {agent} with device {device_id[:16]}… expired", live[0]
        )
    return current[0]


def save_shared_agent(directory: Path, shared: SharedAgent) -> Path:
    path = directory / "shared" / f"{shared.name}.json"
    _write_private(path, msgspec.json.encode(shared))
    return path


def load_shared_agents(directory: Path) -> list[SharedAgent]:
    return [
        _shared_decoder.decode(path.read_bytes())
        for path in sorted((directory / "shared").glob("*.json"))
    ]
