"""The codec: round trips of every kind, typed errors for everything else."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, get_args

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import (
    AnyEnvelope,
    DecodeError,
    HumanMessage,
    Reply,
    decode_envelope,
    decode_frame,
    decode_reply,
    encode,
)
from tests.support.fixtures import example_envelopes

KINDS = {t.__struct_config__.tag for t in get_args(AnyEnvelope)}


def test_every_kind_has_an_example() -> None:
    assert {e.__struct_config__.tag for e in example_envelopes()} == KINDS


@pytest.mark.parametrize("envelope", example_envelopes(), ids=lambda e: e.__struct_config__.tag)
def test_round_trip(envelope: Any) -> None:
    assert decode_envelope(encode(envelope)) == envelope


def test_tags_are_explicit_not_class_names() -> None:
    for kind in get_args(AnyEnvelope):
        assert kind.__struct_config__.tag != kind.__name__
        assert kind.__struct_config__.tag_field == "kind"


def test_unknown_fields_are_skipped_for_forward_compatibility() -> None:
    message = HumanMessage(
        id="m1", created_at=datetime(2026, 1, 1, tzinfo=UTC), text="hi", call_id="c"
    )
    data = msgspec.json.decode(encode(message))
    data["added_in_v2"] = {"x": 1}
    assert decode_envelope(msgspec.json.encode(data)) == message


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "malformed"),
        (b"{", "malformed"),
        (b"\xff\xfe\x00", "malformed"),
        (b"[]", "invalid"),
        (b'{"kind":"no_such_kind","id":"x","created_at":"2026-01-01T00:00:00Z"}', "invalid"),
        (b'{"kind":"human_message","id":"x","created_at":"2026-01-01T00:00:00Z"}', "invalid"),
        (
            b'{"kind":"human_message","id":5,"created_at":"2026-01-01T00:00:00Z","text":"t","call_id":"c"}',
            "invalid",
        ),
        (
            b'{"kind":"human_message","id":"x","created_at":"2026-01-01T00:00:00","text":"t","call_id":"c"}',
            "invalid",
        ),
        (
            b'{"kind":"error","id":"x","created_at":"2026-01-01T00:00:00Z","code":"NOPE","message":"m"}',
            "invalid",
        ),
        (b'{"kind":"error","details":{"a":' + b"[" * 200_000 + b"]" * 200_000 + b"}}", "malformed"),
    ],
)
def test_bad_input_is_a_typed_error(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode_envelope(data)
    assert caught.value.reason == reason
    assert caught.value.detail


def test_size_limit() -> None:
    message = HumanMessage(
        id="m1", created_at=datetime(2026, 1, 1, tzinfo=UTC), text="x" * 2000, call_id="c"
    )
    data = encode(message)
    assert decode_envelope(data, max_bytes=len(data)) == message
    with pytest.raises(DecodeError) as caught:
        decode_envelope(data, max_bytes=len(data) - 1)
    assert caught.value.reason == "oversize"


def test_reply_contract_is_strict() -> None:
    assert decode_reply('{"message":"m","final":true}') == Reply(message="m", final=True)
    for bad in (
        '{"message":""}',
        '{"message":"m","extra":1}',
        '{"message":"m","handoff":{"to":"gpt"}}',
        '{"message":"m","handoff":{"to":"gpt","task":"' + "t" * 501 + '"}}',
        "Sure! Here is my answer",
    ):
        with pytest.raises(DecodeError):
            decode_reply(bad)


def test_frames_decode_with_seed_defaults() -> None:
    frame = decode_frame(
        b'{"type":"desktop.local_prompt.request","request_id":"r","profile_id":"p",'
        b'"session_id":"s","turn_index":0,"objective":"o"}'
    )
    assert frame.constraints.local_turn_timeout_ms == 60000  # type: ignore[union-attr]
    assert frame.constraints.max_history_turns == 6  # type: ignore[union-attr]


@settings(max_examples=3000, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.binary(max_size=2048))
def test_any_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    try:
        decode_envelope(data)
    except DecodeError:
        pass


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=8,
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.sampled_from([*sorted(KINDS), "", "nope"]),
    st.dictionaries(
        st.sampled_from(
            [
                "id",
                "created_at",
                "text",
                "call_id",
                "code",
                "message",
                "session_id",
                "reply",
                "args",
                "status",
                "round",
                "v",
                "x",
            ]
        ),
        json_values,
        max_size=8,
    ),
)
def test_structured_garbage_decodes_or_raises_decode_error(
    kind: str, fields: dict[str, Any]
) -> None:
    try:
        envelope = decode_envelope(msgspec.json.encode({"kind": kind, **fields}))
    except DecodeError:
        return
    assert envelope.__struct_config__.tag == kind


@pytest.mark.parametrize("data", [b'"\xdc"', b'{"kind":"human_message","text":"\xff\xfe"}'])
def test_invalid_utf8_is_a_decode_error(data: bytes) -> None:
    # msgspec raises UnicodeDecodeError here, which an actor's edge must not let through.
    with pytest.raises(DecodeError):
        decode_envelope(data)


@pytest.mark.parametrize(
    "kind",
    [
        "human_message",
        "agent_call",
        "control",
        "delegation_request",
        "sub_agent_call",
        "llm_request",
        "tool_request",
    ],
)
def test_a_user_id_is_a_label_not_a_payload(kind: str) -> None:
    """The gate and the router copy `user_id` into what they keep (positions, sessions, early
    Stops, reminders, audit records): a 300 KB one from a person's Stop was kept a dozen
    times over, filling buckets everyone needs (a review of what one principal can fill)."""
    (example,) = [e for e in example_envelopes() if e.__struct_config__.tag == kind]
    fits = msgspec.structs.replace(example, user_id="u" * 256)
    assert decode_envelope(encode(fits)) == fits
    too_long = msgspec.structs.replace(example, user_id="u" * 257)
    with pytest.raises(DecodeError, match="user_id"):
        decode_envelope(encode(too_long))
