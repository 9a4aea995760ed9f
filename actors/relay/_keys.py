"""A device's two key pairs on disk: Ed25519 to sign, X25519 to be encrypted to.

They are separate keys rather than one converted to the other: each is used for one purpose
only, and `cryptography`'s HPKE takes an X25519 key as it is. The private halves are written
with owner-only permissions (0600) and refused when a file is readable by others, like an
ssh key, since anyone holding them can read and forge the device's traffic.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
)

from schemas import DevicePub

__all__ = (
    "KEM_FILE",
    "SIGNING_FILE",
    "DeviceKeyError",
    "DeviceKeys",
    "ed25519_from_id",
    "x25519_from_hex",
)

SIGNING_FILE = "device.ed25519"
KEM_FILE = "device.x25519"


class DeviceKeyError(RuntimeError):
    """The device's keys are missing, unreadable, of the wrong type, or open to others."""


_PARSED_KEYS = 1024
"""Public keys kept parsed: a relay talks to a handful of devices, so each is parsed once."""


@lru_cache(maxsize=_PARSED_KEYS)
def ed25519_from_id(device_id: str) -> Ed25519PublicKey:
    """The verifying key a device id names (its raw public bytes in hex).

    Parsed once per id: a public key is immutable, and a relay parses the same few for every
    frame. (Nothing secret or per-frame is cached: HPKE's ephemeral keys and contexts are new
    for every frame.)"""
    return Ed25519PublicKey.from_public_bytes(bytes.fromhex(device_id))


@lru_cache(maxsize=_PARSED_KEYS)
def x25519_from_hex(kem_key: str) -> X25519PublicKey:
    """The key frames to a device are encrypted to, parsed once per key (see above)."""
    return X25519PublicKey.from_public_bytes(bytes.fromhex(kem_key))


@dataclass(frozen=True, slots=True)
class DeviceKeys:
    """One device's private keys and the public id they make."""

    signing: Ed25519PrivateKey
    kem: X25519PrivateKey
    _public: DevicePub = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Derived once: every frame sealed or opened names the device's id, and deriving
        # both public keys each time was a tenth of sealing a frame.
        public = DevicePub(
            device_id=self.signing.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex(),
            kem_key=self.kem.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex(),
        )
        object.__setattr__(self, "_public", public)

    @classmethod
    def generate(cls) -> DeviceKeys:
        return cls(Ed25519PrivateKey.generate(), X25519PrivateKey.generate())

    @property
    def public(self) -> DevicePub:
        return self._public

    @property
    def device_id(self) -> str:
        return self._public.device_id

    def save(self, directory: Path, *, overwrite: bool = False) -> None:
        """Write both private keys, owner-only; never replace a device's keys by accident."""
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        for name, key in ((SIGNING_FILE, self.signing), (KEM_FILE, self.kem)):
            path = directory / name
            if path.exists() and not overwrite:
                raise DeviceKeyError(f"{path} exists: this device already has keys")
            pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
            fd = os.open(path, flags, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(pem)
            path.chmod(0o600)

    @classmethod
    def load(cls, directory: Path) -> DeviceKeys:
        signing = _load(directory / SIGNING_FILE)
        kem = _load(directory / KEM_FILE)
        if not isinstance(signing, Ed25519PrivateKey):
            raise DeviceKeyError(f"{directory / SIGNING_FILE} is not an Ed25519 private key")
        if not isinstance(kem, X25519PrivateKey):
            raise DeviceKeyError(f"{directory / KEM_FILE} is not an X25519 private key")
        return cls(signing, kem)


def _load(path: Path) -> object:
    try:
        mode = path.stat().st_mode
        data = path.read_bytes()
    except OSError as exc:
        raise DeviceKeyError(
            f"cannot read device key {path}: {exc.strerror} (run `parley device init`)"
        ) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise DeviceKeyError(f"{path} is readable by others: chmod 600 it")
    try:
        return load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise DeviceKeyError(f"{path} is not a private key: {exc}") from None
