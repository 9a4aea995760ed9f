"""DSSE signing envelopes (Dead Simple Signing Envelope, v1) with Ed25519.

A signature covers the *exact bytes* of the payload (through DSSE's pre-authentication
encoding, which also binds the payload type), so no JSON canonicalisation is needed and
nothing is ever re-serialised to be checked. Verify first, decode second: msgspec keeps the
last of duplicate JSON keys, so only bytes that were signed may reach a decoder.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

__all__ = (
    "DsseEnvelope",
    "DsseError",
    "DsseSignature",
    "key_id",
    "pae",
    "sign_payload",
    "verify_payload",
)


class DsseSignature(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    keyid: str
    sig: str  # standard base64


class DsseEnvelope(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`{payloadType, payload, signatures}` as the DSSE specification writes it."""

    payloadType: str
    payload: str  # standard base64 of the signed bytes
    signatures: tuple[DsseSignature, ...]


class DsseError(ValueError):
    """The envelope is malformed, of the wrong type, or carries no valid trusted signature.

    `reason` is one of `malformed`, `wrong_type`, `unknown_key`, `bad_signature`.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


_decoder = msgspec.json.Decoder(DsseEnvelope)
_encoder = msgspec.json.Encoder()


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what the signature actually covers."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def key_id(public_key: Ed25519PublicKey) -> str:
    """A stable id for a public key: `ed25519:` and 16 hex digits of its SHA-256."""
    raw = public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


def sign_payload(payload: bytes, payload_type: str, private_key: Ed25519PrivateKey) -> bytes:
    """Wrap `payload` in a DSSE envelope signed by `private_key`; return the envelope's JSON."""
    signature = private_key.sign(pae(payload_type, payload))
    envelope = DsseEnvelope(
        payloadType=payload_type,
        payload=base64.b64encode(payload).decode(),
        signatures=(
            DsseSignature(
                keyid=key_id(private_key.public_key()), sig=base64.b64encode(signature).decode()
            ),
        ),
    )
    return _encoder.encode(envelope)


def verify_payload(
    envelope_json: bytes, payload_type: str, trusted: dict[str, Ed25519PublicKey]
) -> tuple[bytes, str]:
    """Return `(payload bytes, key id)` if a trusted key signed them, else raise `DsseError`."""
    try:
        envelope = _decoder.decode(envelope_json)
        payload = base64.b64decode(envelope.payload, validate=True)
    except (msgspec.DecodeError, binascii.Error, ValueError) as exc:
        raise DsseError("malformed", f"not a DSSE envelope: {exc}") from None
    if envelope.payloadType != payload_type:
        raise DsseError(
            "wrong_type", f"payload type is {envelope.payloadType!r}, expected {payload_type!r}"
        )
    known = [s for s in envelope.signatures if s.keyid in trusted]
    if not known:
        ids = ", ".join(s.keyid for s in envelope.signatures) or "none"
        raise DsseError("unknown_key", f"signed by no trusted key (signatures: {ids})")
    message = pae(payload_type, payload)
    for signature in known:
        try:
            trusted[signature.keyid].verify(base64.b64decode(signature.sig, validate=True), message)
        except (InvalidSignature, binascii.Error, ValueError):
            continue
        return payload, signature.keyid
    raise DsseError("bad_signature", "no signature verifies over the payload")
