"""Header parsing is strict: a garbled claim is a typed error, never a crash or a default."""

from __future__ import annotations

import pytest

from bus import (
    CAUSATION_ID,
    DEADLINE,
    HOP_COUNT,
    MSG_ID,
    ORIGIN,
    TRACE_ID,
    TRACEPARENT,
    HeaderError,
    TraceHeaders,
    parse_trace_headers,
    traceparent_for,
)


def test_round_trip() -> None:
    trace = TraceHeaders(
        trace_id="01a20255-6f2f-79c2-a848-0979a0a3fc15",
        hop_count=2,
        causation_id="c",
        origin="router",
        deadline_ms=1_700_000_000_000,
    )
    headers = trace.to_headers("01a20255-6f2f-79c2-a848-0979a0a3fc16")
    assert headers[MSG_ID] == "01a20255-6f2f-79c2-a848-0979a0a3fc16"
    assert headers[TRACEPARENT] == "00-01a202556f2f79c2a8480979a0a3fc15-a8480979a0a3fc16-01"
    assert parse_trace_headers(headers, "ignored") == trace


def test_missing_headers_make_a_root() -> None:
    assert parse_trace_headers(None, "e1") == TraceHeaders(trace_id="e1")
    assert parse_trace_headers({}, "e1").hop_count == 0


def test_child_position() -> None:
    root = TraceHeaders(trace_id="t", hop_count=1, origin="you")
    child = root.child("e1", hop_delta=1)
    assert (child.trace_id, child.hop_count, child.causation_id, child.origin) == (
        "t",
        2,
        "e1",
        "you",
    )
    assert root.child("e2", hop_delta=-5).hop_count == 0


@pytest.mark.parametrize(
    "headers",
    [
        {HOP_COUNT: "-1"},
        {HOP_COUNT: "1.5"},
        {HOP_COUNT: "0x10"},
        {HOP_COUNT: "\uff11"},  # a full-width digit one: isdigit() alone would accept it
        {HOP_COUNT: "1001"},
        {HOP_COUNT: "9" * 40},
        {DEADLINE: "soon"},
        {TRACE_ID: "t" * 129},
        {CAUSATION_ID: "c" * 200},
        {ORIGIN: "o" * 500},
    ],
)
def test_malformed_headers_are_refused(headers: dict[str, str]) -> None:
    with pytest.raises(HeaderError):
        parse_trace_headers(headers, "e1")


def test_a_root_is_started_by_its_sender() -> None:
    assert parse_trace_headers(None, "e1", root_origin="you").origin == "you"
    claimed = TraceHeaders(trace_id="t", origin="router").to_headers("e2")
    assert parse_trace_headers(claimed, "e2", root_origin="you").origin == "router"


def test_traceparent_only_for_hex_ids() -> None:
    assert traceparent_for("not-a-uuid", "e1") == ""
    assert traceparent_for("g" * 32, "0" * 16) == ""
