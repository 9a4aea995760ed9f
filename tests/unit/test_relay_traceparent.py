"""The trace context a relayed frame carries: sealed with it, absent when there is none, and
out of the untrusted gateway's reach."""

from __future__ import annotations

import time
from typing import Annotated, Literal

import msgspec
import pytest
from msgspec import Meta, Struct

from actors.relay import DeviceKeys, FrameError, open_frame, seal_frame
from schemas import AgentCall, FrameBody, encode, new_id, utc_now
from tests.support.relay import forge_frame

ALICE, BOB, MALLORY = DeviceKeys.generate(), DeviceKeys.generate(), DeviceKeys.generate()
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


class FrameBodyBefore(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`FrameBody` as relays before the trace context wrote and read it."""

    v: Literal[1] = 1
    sender_device: str
    recipient_device: str
    session: str
    seq: int
    kind: Literal["call", "answer"]
    agent: str = ""
    in_reply_to: str = ""
    sent_at_ms: int
    envelope: bytes
    hop_count: Annotated[int, Meta(ge=0, le=1000)] = 0
    numbered_by: Literal["relay", "deliveries"] = "relay"
    ticket: bytes = b""


def _fields(**extra: str) -> dict[str, object]:
    call = AgentCall(
        id=new_id(), created_at=utc_now(), target="bob-byte-doc", call_id=new_id(), goal="g"
    )
    return {
        "sender_device": ALICE.device_id,
        "recipient_device": BOB.device_id,
        "session": "s-1",
        "seq": 3,
        "kind": "call",
        "agent": "byte-doc",
        "sent_at_ms": int(time.time() * 1000),
        "envelope": encode(call),
        "hop_count": 1,
        "numbered_by": "deliveries",
        **extra,
    }


def _open(frame: bytes) -> FrameBody:
    return open_frame(frame, BOB, frozenset({ALICE.device_id}))


def test_a_frames_traceparent_is_sealed_with_it_and_hidden_from_the_gateway() -> None:
    body = FrameBody(**_fields(traceparent=TRACEPARENT))  # type: ignore[arg-type]
    frame = seal_frame(body, ALICE, BOB.public.kem_key)
    assert _open(frame).traceparent == TRACEPARENT
    assert TRACE.encode() not in frame and b"traceparent" not in frame


def test_without_a_traceparent_a_frame_is_what_older_relays_send_and_read() -> None:
    """Compatibility both ways: a frame with no trace context is byte for byte the body an
    older relay writes (so it reads it, and this relay reads the older one's); a frame with
    one is refused by an older relay, as any unknown field is."""
    fields = _fields()
    plain = msgspec.json.encode(FrameBody(**fields))  # type: ignore[arg-type]
    assert plain == msgspec.json.encode(FrameBodyBefore(**fields))  # type: ignore[arg-type]
    assert msgspec.json.decode(plain, type=FrameBody).traceparent is msgspec.UNSET
    traced = msgspec.json.encode(FrameBody(**_fields(traceparent=TRACEPARENT)))  # type: ignore[arg-type]
    with pytest.raises(msgspec.ValidationError, match="traceparent"):
        msgspec.json.decode(traced, type=FrameBodyBefore)


@pytest.mark.parametrize(
    "traceparent",
    [
        "",
        "00-" + "0" * 32,
        f"01-{TRACE}-00f067aa0ba902b7-01",
        f"00-{TRACE.upper()}-00f067aa0ba902b7-01",
        f"00-{TRACE}-00f067aa0ba902b7-01-extra",
    ],
)
def test_a_frame_with_a_malformed_traceparent_is_refused(traceparent: str) -> None:
    """Only a W3C version 00 traceparent opens, as the OpenTelemetry propagator writes it."""
    body = msgspec.json.encode(FrameBodyBefore(**_fields()))  # type: ignore[arg-type]

    def sealed_with(value: str) -> bytes:
        return _forged(body[:-1] + f',"traceparent":"{value}"}}'.encode(), ALICE)

    assert _open(sealed_with(TRACEPARENT)).traceparent == TRACEPARENT
    assert _reason(sealed_with(traceparent)) == "malformed"


def test_the_gateway_cannot_put_its_own_traceparent_into_a_frame() -> None:
    """The gateway can encrypt to Bob's public key, but not sign as Alice: a body re-sealed
    with another traceparent, or with one added to a frame that had none, is refused."""
    for fields in (_fields(traceparent=TRACEPARENT), _fields()):
        genuine = FrameBody(**fields)  # type: ignore[arg-type]
        assert _open(seal_frame(genuine, ALICE, BOB.public.kem_key)) == genuine
        forged = FrameBody(**{**fields, "traceparent": f"00-{'e' * 32}-{'f' * 16}-01"})  # type: ignore[arg-type]
        assert _reason(_forged(msgspec.json.encode(forged), MALLORY)) == "bad_signature"


def _reason(frame: bytes) -> str:
    with pytest.raises(FrameError) as refused:
        _open(frame)
    return refused.value.reason


def _forged(plain: bytes, signer: DeviceKeys) -> bytes:
    """Exact body bytes sealed in Alice's name to Bob, signed by `signer`."""
    return forge_frame(plain, ALICE, BOB, signer)
