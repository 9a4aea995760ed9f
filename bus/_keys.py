"""Reading Ed25519 keys from PEM files: the policy signer's, the gates', the auditor's.

One place, so every tool and actor refuses a missing file, a malformed one or a key of the
wrong type with the same clear message.
"""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key, load_pem_public_key

__all__ = ("KeyFileError", "load_private_key", "load_public_key")


class KeyFileError(ValueError):
    """A key file that cannot be read, or that holds no Ed25519 key of the expected kind."""


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """Read an unencrypted Ed25519 private key (PEM, PKCS#8).

    Raises:
        KeyFileError: unreadable, malformed, or not an Ed25519 private key.
    """
    try:
        key = load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise KeyFileError(f"cannot read private key {path}: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path} is not an Ed25519 private key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """Read an Ed25519 public key (PEM, SubjectPublicKeyInfo).

    Raises:
        KeyFileError: unreadable, malformed, or not an Ed25519 public key.
    """
    try:
        key = load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"cannot read public key {path}: {exc}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"{path} is not an Ed25519 public key")
    return key
