"""What a rejected submission's sender is told: the field, the problem and the value."""

from __future__ import annotations

from bus._rejection import claimed_id, describe
from schemas import DecodeError, decode_envelope


def _describe(payload: bytes) -> tuple[str, str, object]:
    try:
        decode_envelope(payload)
    except DecodeError as exc:
        return describe(f"decode_{exc.reason}", exc.detail, payload)
    raise AssertionError("the payload decoded")


BASE = b'"kind":"human_message","id":"x1","created_at":"2026-01-01T00:00:00Z","call_id":"c"'


def test_an_out_of_range_field_is_named_with_its_value() -> None:
    field, problem, value = _describe(b"{" + BASE + b',"text":"t","max_rounds":0}')
    assert (field, value) == ("max_rounds", 0)
    assert ">= 1" in problem


def test_a_missing_field_is_named() -> None:
    field, problem, value = _describe(b"{" + BASE + b"}")
    assert (field, value) == ("text", None)
    assert "missing" in problem


def test_bytes_that_are_not_json_name_the_payload() -> None:
    field, _problem, value = _describe(b"{not json")
    assert (field, value) == ("payload", None)
    assert claimed_id(b"{not json") == ""
    assert claimed_id(b"{" + BASE + b"}") == "x1"


def test_a_bad_header_is_named() -> None:
    field, _, _ = describe("bad_header", "Parley-Hop-Count must be within 0..1000, got 5000", b"")
    assert field == "Parley-Hop-Count"
