"""The one place bytes become envelopes and back.

Encoders and decoders are built once at import: msgspec compiles a decoder per type, and a
tagged union decodes in a single pass with no trial-and-error. Decoding never raises anything
but `DecodeError`, whose `reason` says what was wrong, so a caller at the bus edge can
dead-letter the message and go on.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

import msgspec

from schemas._delegation import DelegateReply
from schemas._envelopes import AnyEnvelope, Reply
from schemas._frames import AnyFrame

__all__ = (
    "DEFAULT_MAX_BYTES",
    "DecodeError",
    "decode_delegate_reply",
    "decode_envelope",
    "decode_frame",
    "decode_reply",
    "encode",
)

DEFAULT_MAX_BYTES: Final = 1024 * 1024
"""Largest payload accepted (1 MiB, the streams' `max_msg_size` too)."""

T = TypeVar("T")

_encoder = msgspec.json.Encoder()
_envelope_decoder: Final[msgspec.json.Decoder[AnyEnvelope]] = msgspec.json.Decoder(AnyEnvelope)
_frame_decoder: Final[msgspec.json.Decoder[AnyFrame]] = msgspec.json.Decoder(AnyFrame)
_reply_decoder: Final[msgspec.json.Decoder[Reply]] = msgspec.json.Decoder(Reply)
_delegate_reply_decoder: Final[msgspec.json.Decoder[DelegateReply]] = msgspec.json.Decoder(
    DelegateReply
)


class DecodeError(ValueError):
    """Bytes that are not a valid envelope. `reason` is a short machine-usable category."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def encode(value: Any) -> bytes:
    """Encode an envelope, frame or reply as compact JSON."""
    return _encoder.encode(value)


def _decode(
    decoder: msgspec.json.Decoder[T], data: bytes | bytearray | memoryview, limit: int
) -> T:
    if len(data) > limit:
        raise DecodeError("oversize", f"payload is {len(data)} bytes, the limit is {limit}")
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise DecodeError("invalid", str(exc)) from None
    except msgspec.DecodeError as exc:
        raise DecodeError("malformed", str(exc)) from None
    except UnicodeDecodeError as exc:  # msgspec's error for invalid UTF-8 inside a string
        raise DecodeError("malformed", f"invalid UTF-8: {exc}") from None
    except RecursionError:
        raise DecodeError("malformed", "JSON nested too deeply") from None


def decode_envelope(
    data: bytes | bytearray | memoryview, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> AnyEnvelope:
    """Decode one envelope of any kind, or raise `DecodeError`."""
    return _decode(_envelope_decoder, data, max_bytes)


def decode_frame(
    data: bytes | bytearray | memoryview, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> AnyFrame:
    """Decode one local-agent bridge frame (seed 000), or raise `DecodeError`."""
    return _decode(_frame_decoder, data, max_bytes)


def decode_reply(
    data: bytes | bytearray | memoryview | str, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> Reply:
    """Decode an agent's `{message, handoff?, final?}` reply strictly, or raise `DecodeError`."""
    raw = data.encode() if isinstance(data, str) else data
    return _decode(_reply_decoder, raw, max_bytes)


def decode_delegate_reply(
    data: bytes | bytearray | memoryview | str, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> DelegateReply:
    """Decode a delegate's reply (seed 001's message with seed 003's response fields)
    strictly, or raise `DecodeError`."""
    raw = data.encode() if isinstance(data, str) else data
    return _decode(_delegate_reply_decoder, raw, max_bytes)
