"""Parley's NATS headers: names, how to build them, and how to read them strictly.

Headers are claims, not facts: NATS does not authenticate them. Parsing is strict so a forged
or garbled header is a typed `HeaderError` at the edge (and a dead-letter record), and the gate
compares the claims it gets with its own records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = (
    "BOUND_BY",
    "CAUSATION_ID",
    "DEADLINE",
    "HOP_COUNT",
    "MAX_HOP_COUNT_HEADER",
    "MSG_ID",
    "ORIGIN",
    "OWNER",
    "SENDER",
    "SENDER_ROLE",
    "SESSION",
    "TRACEPARENT",
    "TRACE_ID",
    "HeaderError",
    "TraceHeaders",
    "parse_trace_headers",
    "traceparent_for",
    "well_formed_traceparent",
)

TRACE_ID = "Parley-Trace-Id"
HOP_COUNT = "Parley-Hop-Count"
CAUSATION_ID = "Parley-Causation-Id"
ORIGIN = "Parley-Origin"
SENDER = "Parley-Sender"
"""Set by the gate on delivered envelopes: the submitting actor, taken from its subject."""
SENDER_ROLE = "Parley-Sender-Role"
"""Set by the gate on delivered envelopes whose sender's profile speaks for a person:
`person`, or `operator` for an operator role, from the signed policy bundle. Trustworthy on a
deliver subject only, which the gate alone may write."""
BOUND_BY = "Parley-Bound-By"
"""Set by the gate on a delivered tool request: the agents whose capabilities bound it, its
sender last (actors/gate/_tool_checks.py). The tool runtime narrows the scope by each of them
again; trustworthy on a deliver subject only, which the gate alone may write."""
SESSION = "Parley-Session"
"""Set by the gate on a delivered tool request (and an `llm_request` with `OWNER`): the
session its trace works in (its root's, else the trace itself), from the gate's own records.
The tool runtime's workspace is that session's, never one a request names; trustworthy on a
deliver subject only."""
OWNER = "Parley-Session-Owner"
"""Set by the gate on a delivered `llm_request` made in a person's session: that person (its
trace's origin), beside `SESSION`, from the gate's own records. The LLM gateway sends the text
being written to that person's typing subject; trustworthy on a deliver subject only."""
DEADLINE = "Parley-Deadline"
"""Absolute deadline of the call chain, in Unix milliseconds. The gate delivers its own record
of it; a tool request's sender claims how long it waits, which only shortens it."""
MSG_ID = "Nats-Msg-Id"
TRACEPARENT = "traceparent"

MAX_HOP_COUNT_HEADER = 1_000
"""A hop count above this cannot be honest under any policy; it is refused as malformed."""

_MAX_ID_LEN = 128
_HEX = frozenset("0123456789abcdef")


class HeaderError(ValueError):
    """A Parley header is present but malformed (bad integer, out of range, too long)."""


@dataclass(frozen=True, slots=True)
class TraceHeaders:
    """The causal position of an envelope: which tree, how deep, caused by what."""

    trace_id: str
    hop_count: int = 0
    causation_id: str = ""
    origin: str = ""
    deadline_ms: int | None = None

    def to_headers(self, envelope_id: str) -> dict[str, str]:
        """Headers for publishing envelope `envelope_id` at this position (with its msg id)."""
        headers = {
            MSG_ID: envelope_id,
            TRACE_ID: self.trace_id,
            HOP_COUNT: str(self.hop_count),
            CAUSATION_ID: self.causation_id,
            ORIGIN: self.origin,
            TRACEPARENT: traceparent_for(self.trace_id, envelope_id),
        }
        if self.deadline_ms is not None:
            headers[DEADLINE] = str(self.deadline_ms)
        return headers

    def child(self, causation_id: str, hop_delta: int = 0) -> TraceHeaders:
        """The position of an envelope caused by `causation_id`, `hop_delta` hops deeper."""
        return TraceHeaders(
            trace_id=self.trace_id,
            hop_count=max(0, self.hop_count + hop_delta),
            causation_id=causation_id,
            origin=self.origin,
            deadline_ms=self.deadline_ms,
        )


def _bounded(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name, "")
    if len(value) > _MAX_ID_LEN:
        raise HeaderError(f"{name} is {len(value)} characters, the limit is {_MAX_ID_LEN}")
    return value


def _int_header(headers: Mapping[str, str], name: str, low: int, high: int) -> int | None:
    raw = headers.get(name)
    if raw is None or raw == "":
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 19:
        raise HeaderError(f"{name} must be a non-negative integer, got {raw[:32]!r}")
    value = int(raw)
    if not low <= value <= high:
        raise HeaderError(f"{name} must be within {low}..{high}, got {value}")
    return value


def parse_trace_headers(
    headers: Mapping[str, str] | None, envelope_id: str, root_origin: str = ""
) -> TraceHeaders:
    """Read the trace headers of a received message.

    A message without a trace id starts a new trace named after itself (a root); a message
    without an origin was started by `root_origin` (its sender).

    Raises:
        HeaderError: a header is present but malformed.
    """
    if not headers:
        return TraceHeaders(trace_id=envelope_id, origin=root_origin)
    hop = _int_header(headers, HOP_COUNT, 0, MAX_HOP_COUNT_HEADER)
    deadline = _int_header(headers, DEADLINE, 0, 2**62)
    return TraceHeaders(
        trace_id=_bounded(headers, TRACE_ID) or envelope_id,
        hop_count=hop or 0,
        causation_id=_bounded(headers, CAUSATION_ID),
        origin=_bounded(headers, ORIGIN) or root_origin,
        deadline_ms=deadline,
    )


def traceparent_for(trace_id: str, envelope_id: str) -> str:
    """A W3C `traceparent` so OpenTelemetry users can join Parley traces to theirs."""
    trace_hex = trace_id.replace("-", "")
    span_hex = envelope_id.replace("-", "")[-16:]
    if len(trace_hex) != 32 or len(span_hex) != 16 or not _HEX.issuperset(trace_hex + span_hex):
        return ""
    return f"00-{trace_hex}-{span_hex}-01"


def well_formed_traceparent(headers: Mapping[str, str] | None) -> str:
    """The message's `traceparent` if it is a well-formed W3C version-00 one, else "": a
    claim like any header, kept (in an audit record) only in the one shape it may have."""
    value = (headers or {}).get(TRACEPARENT, "")
    parts = value.split("-")
    if len(value) != 55 or [len(part) for part in parts] != [2, 32, 16, 2]:
        return ""
    if parts[0] != "00" or not _HEX.issuperset(value.replace("-", "")):
        return ""
    if parts[1] == "0" * 32 or parts[2] == "0" * 16:
        return ""
    return value
