"""Sealing relayed frames: what opens, and the typed refusal of everything else."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import pytest
from cryptography.hazmat.primitives import hpke
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.relay import (
    WIDTH,
    DeviceKeys,
    FrameError,
    ReplayRefused,
    ReplayWindow,
    accept,
    frame_devices,
    open_frame,
    seal_frame,
)
from actors.relay._keys import ed25519_from_id, x25519_from_hex
from schemas import AgentCall, FrameBody, encode, new_id, utc_now

ALICE, BOB, MALLORY = DeviceKeys.generate(), DeviceKeys.generate(), DeviceKeys.generate()


def _body(
    sender: DeviceKeys = ALICE, recipient: DeviceKeys = BOB, seq: int = 1, hop: int = 1
) -> FrameBody:
    call = AgentCall(
        id=new_id(), created_at=utc_now(), target="bob-byte-doc", call_id=new_id(), goal="g"
    )
    return FrameBody(
        sender_device=sender.device_id,
        recipient_device=recipient.device_id,
        session="s-1",
        seq=seq,
        kind="call",
        agent="byte-doc",
        sent_at_ms=int(time.time() * 1000),
        envelope=encode(call),
        hop_count=hop,
    )


def _open(frame: bytes, keys: DeviceKeys = BOB) -> FrameBody:
    return open_frame(frame, keys, frozenset({ALICE.device_id}))


def _reason(frame: bytes, keys: DeviceKeys = BOB) -> str:
    with pytest.raises(FrameError) as refused:
        _open(frame, keys)
    return refused.value.reason


def test_a_sealed_frame_opens_to_its_exact_body() -> None:
    body = _body()
    frame = seal_frame(body, ALICE, BOB.public.kem_key)
    assert _open(frame) == body
    assert frame_devices(frame) == (ALICE.device_id, BOB.device_id)
    assert body.envelope not in frame and b"byte-doc" not in frame and b"s-1" not in frame


def test_every_flipped_bit_of_the_ciphertext_is_refused() -> None:
    frame = seal_frame(_body(), ALICE, BOB.public.kem_key)
    for index in range(72, len(frame), 7):
        flipped = bytearray(frame)
        flipped[index] ^= 0x01
        assert _reason(bytes(flipped)) == "tampered", index


def test_truncated_and_garbage_frames_are_refused() -> None:
    frame = seal_frame(_body(), ALICE, BOB.public.kem_key)
    assert _reason(frame[:-1]) == "truncated"
    assert _reason(frame[:100]) == "truncated"
    assert _reason(frame[:40]) == "malformed"
    assert _reason(b"") == "malformed"
    assert _reason(b"X" + frame[1:]) == "malformed"


def test_a_frame_for_another_device_is_refused() -> None:
    frame = seal_frame(_body(), ALICE, BOB.public.kem_key)
    assert _reason(frame, MALLORY) == "wrong_recipient"


def test_a_frame_sealed_to_another_key_does_not_decrypt() -> None:
    """The header names Bob, the ciphertext is for Mallory's key."""
    frame = seal_frame(_body(), ALICE, MALLORY.public.kem_key)
    assert _reason(frame) == "tampered"


def test_a_frame_from_an_unknown_device_is_refused() -> None:
    frame = seal_frame(_body(sender=MALLORY), MALLORY, BOB.public.kem_key)
    assert _reason(frame) == "unknown_sender"


def test_a_frame_signed_by_another_key_is_refused() -> None:
    """Mallory, who knows Bob's public key, seals a body in Alice's name signed by Mallory."""
    body = _body()
    with pytest.raises(ValueError, match="sender"):
        seal_frame(body, MALLORY, BOB.public.kem_key)  # the sealer refuses to lie itself
    frame = seal_frame(body, ALICE, BOB.public.kem_key)
    assert _reason(_resign(frame, body, MALLORY)) == "bad_signature"


def _resign(frame: bytes, body: FrameBody, signer: DeviceKeys) -> bytes:
    """Re-seal `body` under Alice's header with a signature by `signer`: anyone can encrypt
    to Bob's public key, only Alice can sign as Alice."""
    return _seal_plain(frame[:68], msgspec.json.encode(body), signer)


def _seal_plain(header: bytes, plain: bytes, signer: DeviceKeys = ALICE) -> bytes:
    """Seal exact body bytes under `header`, signed by `signer` (a sender's own encoding)."""
    suite = hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.CHACHA20_POLY1305)
    signature = signer.signing.sign(b"parley-relay-frame-v1\x00" + plain)
    sealed = suite.encrypt(
        signature + plain, BOB.kem.public_key(), info=b"parley-relay-v1" + header[4:68]
    )
    return header + len(sealed).to_bytes(4, "big") + sealed


def test_the_calling_sides_hop_count_is_signed_with_the_frame() -> None:
    """Loop prevention across deployments rests on the hop count a frame carries: it opens
    as sealed, and a frame whose count was lowered under Alice's signature is refused."""
    body = _body(hop=2)
    frame = seal_frame(body, ALICE, BOB.public.kem_key)
    assert _open(frame).hop_count == 2
    signed = msgspec.json.encode(body)
    lowered = msgspec.structs.replace(body, hop_count=0)
    suite = hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.CHACHA20_POLY1305)
    signature = ALICE.signing.sign(b"parley-relay-frame-v1\x00" + signed)
    sealed = suite.encrypt(
        signature + msgspec.json.encode(lowered),
        BOB.kem.public_key(),
        info=b"parley-relay-v1" + frame[4:68],
    )
    assert _reason(frame[:68] + len(sealed).to_bytes(4, "big") + sealed) == "bad_signature"


def test_a_frame_that_names_no_hop_count_opens_as_a_fresh_root() -> None:
    """A sender from before the hop count was signed writes no `hop_count` at all."""
    body = _body(hop=3)
    fields = msgspec.to_builtins(body)
    del fields["hop_count"]
    header = seal_frame(body, ALICE, BOB.public.kem_key)[:68]
    assert _open(_seal_plain(header, msgspec.json.encode(fields))).hop_count == 0


def test_a_stale_frame_is_refused() -> None:
    body = _body()
    frame = seal_frame(body, ALICE, BOB.public.kem_key)
    later = body.sent_at_ms + 3_600_000
    with pytest.raises(FrameError) as refused:
        open_frame(frame, BOB, frozenset({ALICE.device_id}), max_age_s=60, now_ms=later)
    assert refused.value.reason == "expired"


def test_the_window_refuses_replays_and_too_old_numbers_and_allows_reordering() -> None:
    window = ReplayWindow()
    for seq in (1, 3, 2, 10):
        window = accept(window, seq)
    for seq in (1, 2, 3, 10):
        with pytest.raises(ReplayRefused) as refused:
            accept(window, seq)
        assert refused.value.reason == "replay"
    window = accept(window, 9)  # late, but inside the window
    window = accept(window, 10 + WIDTH)
    with pytest.raises(ReplayRefused) as refused:
        accept(window, 10)
    assert refused.value.reason == "too_old"
    with pytest.raises(ReplayRefused):
        accept(window, 0)
    assert accept(window, 11 + WIDTH).highest == 11 + WIDTH


FRAME = seal_frame(_body(), ALICE, BOB.public.kem_key)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_any_bytes_are_refused_with_a_frame_error_never_a_crash(data: bytes) -> None:
    with pytest.raises(FrameError):
        _open(data)
    with pytest.raises(FrameError):
        _open(FRAME[:72] + data)  # a valid header over garbage


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=len(FRAME) - 1), st.integers(min_value=1, max_value=255))
def test_every_altered_byte_of_a_frame_is_refused(index: int, mask: int) -> None:
    altered = bytearray(FRAME)
    altered[index] ^= mask
    with pytest.raises(FrameError):
        _open(bytes(altered))


def test_a_devices_public_keys_are_derived_once_and_parsed_once(tmp_path: Path) -> None:
    """Sealing names the device's id and parses the recipient's key for every frame: both are
    worked out once (the keys never change), and a device loaded from disk is the same."""
    keys = DeviceKeys.generate()
    assert keys.public is keys.public and keys.device_id == keys.public.device_id
    assert x25519_from_hex(BOB.public.kem_key) is x25519_from_hex(BOB.public.kem_key)
    assert ed25519_from_id(ALICE.device_id) is ed25519_from_id(ALICE.device_id)
    keys.save(tmp_path)
    assert DeviceKeys.load(tmp_path).public == keys.public
    assert _open(seal_frame(_body(), ALICE, BOB.public.kem_key)).seq == 1
