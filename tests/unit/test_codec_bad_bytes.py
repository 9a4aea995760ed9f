"""Bytes found by the bad-input suite: each must be a typed DecodeError, never another error."""

from __future__ import annotations

import pytest

from schemas import DecodeError, decode_envelope


@pytest.mark.parametrize(
    "data",
    [
        b'{"kind":"human_message","text":"\xc3\x28"}',
        b'{"kind":"agent_call","id":"\xff\xfe"}',
        b"[" * 100_000,
        b'{"a":' * 5000,
    ],
)
def test_undecodable_bytes_raise_a_typed_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError) as caught:
        decode_envelope(data)
    assert caught.value.reason in {"malformed", "invalid"}
