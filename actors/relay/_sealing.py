"""Sealing one relayed frame: sign, then encrypt to the recipient device (pure, no I/O).

HPKE's base mode (RFC 9180) hides the plaintext but not who wrote it: anyone may encrypt to a
public key. So the sender first signs, with its device's Ed25519 key, the exact bytes of a
`schemas.FrameBody` that holds both device ids, the session, the sequence number, the
calling side's hop count and the envelope, and then encrypts signature and body together to
the recipient's X25519 key (X25519, HKDF-SHA256, ChaCha20-Poly1305). The untrusted gateway
sees only the outer header: the two device ids (it routes on them) and the length.

Opening checks in an order that never decodes unauthenticated bytes: the header, the
recipient, the AEAD tag, the sender's signature over the exact body bytes, and only then the
body, whose device ids must repeat the header's. Each failure is a typed `FrameError` with a
short `reason`, so the relay can dead-letter and audit it by name.

Wire layout: `PRL1` | sender id (32) | recipient id (32) | ciphertext length (4, big-endian) |
HPKE ciphertext of (signature (64) | body JSON).
"""

from __future__ import annotations

import time

import msgspec
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hpke

from actors.relay._keys import DeviceKeys, ed25519_from_id, x25519_from_hex
from schemas import FrameBody

__all__ = ("FrameError", "frame_devices", "open_frame", "seal_frame")

MAGIC = b"PRL1"
_ID = 32
_SIG = 64
_HEADER = len(MAGIC) + 2 * _ID + 4
_ENC = 32  # X25519's encapsulated key
_TAG = 16  # ChaCha20-Poly1305's tag
_SUITE = hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.CHACHA20_POLY1305)
_SIGNED_CONTEXT = b"parley-relay-frame-v1\x00"
_INFO = b"parley-relay-v1"
_encoder = msgspec.json.Encoder()


_decoder = msgspec.json.Decoder(FrameBody)


class FrameError(ValueError):
    """A frame that must not be acted on.

    `reason`: `malformed` (not a frame), `truncated` (shorter than its header says),
    `wrong_recipient` (for another device), `unknown_sender` (a device this side has no
    share or shared agent with), `tampered` (the AEAD tag fails: bit-flipped, or encrypted to
    another key), `bad_signature` (decrypts, but the sender's key did not sign it),
    `mismatch` (the signed body names other devices than the header), `expired` (older than
    the receiver keeps replay windows).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def seal_frame(body: FrameBody, keys: DeviceKeys, recipient_kem: str) -> bytes:
    """Sign `body` with the sender's device key, encrypt it to `recipient_kem`."""
    if body.sender_device != keys.device_id:
        raise ValueError("a frame's sender must be the device that seals it")
    plain = _encoder.encode(body)
    signature = keys.signing.sign(_SIGNED_CONTEXT + plain)
    sender = bytes.fromhex(body.sender_device)
    recipient = bytes.fromhex(body.recipient_device)
    sealed = _SUITE.encrypt(
        signature + plain, x25519_from_hex(recipient_kem), info=_INFO + sender + recipient
    )
    return MAGIC + sender + recipient + len(sealed).to_bytes(4, "big") + sealed


def frame_devices(frame: bytes) -> tuple[str, str]:
    """(sender, recipient) device ids from a frame's clear header, unauthenticated."""
    if len(frame) < _HEADER or not frame.startswith(MAGIC):
        raise FrameError("malformed", f"not a relay frame ({len(frame)} bytes)")
    return frame[4 : 4 + _ID].hex(), frame[4 + _ID : 4 + 2 * _ID].hex()


def open_frame(
    frame: bytes,
    keys: DeviceKeys,
    known_senders: frozenset[str],
    *,
    max_age_s: float | None = None,
    now_ms: int | None = None,
) -> FrameBody:
    """Check and decrypt one frame addressed to `keys`' device; raise `FrameError`."""
    sender, recipient = frame_devices(frame)
    declared = int.from_bytes(frame[_HEADER - 4 : _HEADER], "big")
    sealed = frame[_HEADER:]
    if len(sealed) < declared:
        raise FrameError(
            "truncated", f"frame holds {len(sealed)} of its {declared} ciphertext bytes"
        )
    if len(sealed) != declared or declared < _ENC + _TAG + _SIG:
        raise FrameError("malformed", f"ciphertext length {len(sealed)}, header says {declared}")
    if recipient != keys.device_id:
        raise FrameError("wrong_recipient", f"frame is for device {recipient[:16]}…")
    if sender not in known_senders:
        raise FrameError("unknown_sender", f"no share or shared agent with device {sender[:16]}…")
    try:
        plain = _SUITE.decrypt(
            sealed, keys.kem, info=_INFO + bytes.fromhex(sender) + bytes.fromhex(recipient)
        )
    except InvalidTag:
        raise FrameError(
            "tampered", "the frame does not decrypt (altered, or sealed to another key)"
        ) from None
    signature, body_bytes = plain[:_SIG], plain[_SIG:]
    try:
        ed25519_from_id(sender).verify(signature, _SIGNED_CONTEXT + body_bytes)
    except InvalidSignature:
        raise FrameError(
            "bad_signature", f"device {sender[:16]}… did not sign this frame"
        ) from None
    try:
        body = _decoder.decode(body_bytes)
    except msgspec.DecodeError as exc:
        raise FrameError("malformed", f"signed body does not decode: {exc}") from None
    if (body.sender_device, body.recipient_device) != (sender, recipient):
        raise FrameError("mismatch", "the signed body names other devices than the header")
    if max_age_s is not None:
        age_ms = (now_ms if now_ms is not None else int(time.time() * 1000)) - body.sent_at_ms
        if age_ms > max_age_s * 1000:
            raise FrameError(
                "expired", f"frame is {age_ms / 1000:.0f} s old (limit {max_age_s:.0f} s)"
            )
    return body
