"""Bad input for actors: hypothesis-generated payloads and header sets, and the oracle.

Each case is the bytes and headers one publish carries. The strategies mix raw bytes, valid
envelopes broken in one way (truncated, a field of the wrong type, an unknown kind, an
unknown field, a duplicate key, invalid UTF-8 inside a string), deep nesting, huge strings,
and forged headers (hop counts out of range, senders that are not subject tokens). Some
cases stay valid on purpose (an unknown field is skipped by design): the oracle
`expected_reason()` says which must be dead-lettered and why, from the same public decoder
and header parser the runtime uses.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from bus import CAUSATION_ID, HOP_COUNT, SENDER, TRACE_ID, HeaderError, parse_trace_headers
from schemas import (
    AgentCall,
    DecodeError,
    HumanMessage,
    SubjectTokenError,
    check_token,
    decode_envelope,
    encode,
    new_id,
    utc_now,
)

__all__ = ("BadCase", "bad_cases", "crafted_cases", "expected_reason")

MAX_PAYLOAD = 1024 * 1024


@dataclass(frozen=True, slots=True)
class BadCase:
    """One publish: payload and headers."""

    payload: bytes
    headers: dict[str, str]


def _valid(target: str) -> dict[str, Any]:
    call = AgentCall(
        id=new_id(),
        created_at=utc_now(),
        target=target,
        call_id=new_id(),
        goal="g",
        text="hello",
    )
    decoded: dict[str, Any] = msgspec.json.decode(encode(call))
    return decoded


_WRONG = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
_TOKEN_BREAKERS = st.sampled_from(["*", ">", "a.b", ".", "x>", "a*"])
_ASCII = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=20)


def _headers() -> st.SearchStrategy[dict[str, str]]:
    hop = st.one_of(
        st.integers(min_value=-(10**12), max_value=10**12).map(str),
        st.sampled_from(["-1", "1e3", "abc", "", "99999999999999999999"]),
    )
    sender = st.one_of(st.just("router"), _TOKEN_BREAKERS)
    return st.fixed_dictionaries(
        {},
        optional={
            HOP_COUNT: hop,
            SENDER: sender,
            TRACE_ID: st.one_of(_TOKEN_BREAKERS, _ASCII),
            CAUSATION_ID: st.one_of(_TOKEN_BREAKERS, _ASCII),
        },
    )


def _broken(draw: st.DrawFn, target: str) -> bytes:
    body = _valid(target)
    how = draw(
        st.sampled_from(
            ["truncate", "wrong_type", "unknown_kind", "unknown_field", "duplicate", "utf8"]
        )
    )
    if how == "wrong_type":
        body[draw(st.sampled_from(sorted(body)))] = draw(_WRONG)
    elif how == "unknown_kind":
        body["kind"] = draw(st.text(max_size=30))
    elif how == "unknown_field":
        body[draw(st.text(min_size=1, max_size=20))] = draw(_WRONG)
    raw = json.dumps(body).encode()
    if how == "truncate":
        return raw[: draw(st.integers(min_value=0, max_value=len(raw) - 1))]
    if how == "duplicate":
        return b'{"kind":"nonsense",' + raw[1:]
    if how == "utf8":
        return raw.replace(b'"hello"', b'"hel\xff\xfelo"')
    return raw


@st.composite
def _case(draw: st.DrawFn, target: str) -> BadCase:
    shape = draw(st.sampled_from(["raw", "broken", "nested", "huge", "text"]))
    if shape == "raw":
        payload = draw(st.binary(max_size=200))
    elif shape == "broken":
        payload = _broken(draw, target)
    elif shape == "nested":
        depth = draw(st.integers(min_value=1, max_value=5000))
        opener = draw(st.sampled_from(["[", '{"a":']))
        payload = (opener * depth).encode()
    elif shape == "huge":
        payload = json.dumps(
            {"kind": "agent_call", "text": "x" * draw(st.integers(10_000, 120_000))}
        ).encode()
    else:
        payload = draw(st.text(max_size=100)).encode("utf-8", "surrogatepass")
    return BadCase(payload, draw(_headers()))


def bad_cases(count: int, target: str) -> list[BadCase]:
    """`count` generated cases aimed at `target` (the name valid-looking calls address)."""
    found: list[BadCase] = []

    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(_case(target))
    def collect(case: BadCase) -> None:
        found.append(case)

    collect()
    return found[:count]


def crafted_cases(target: str) -> list[BadCase]:
    """The named edge cases, each at least once whatever hypothesis draws."""
    valid = _valid(target)
    raw = json.dumps(valid).encode()

    def human() -> bytes:
        """A valid message of its own id: the gate refuses a repeated id (DUPLICATE_ENVELOPE),
        which would be a second decision about one envelope, not a header case."""
        return encode(HumanMessage(id=new_id(), created_at=utc_now(), text="hi", call_id=new_id()))

    return [
        BadCase(raw[: len(raw) // 2], {}),
        BadCase(b"[" * 100_000, {}),
        BadCase(raw.replace(b'"hello"', b'"\xc3\x28"'), {}),
        BadCase(json.dumps({**valid, "text": "y" * 400_000}).encode(), {}),
        BadCase(b'{"kind":"agent_call","kind":"no_such_kind"}', {}),
        BadCase(json.dumps({**valid, "kind": "no_such_kind"}).encode(), {}),
        BadCase(human(), {HOP_COUNT: "-5"}),
        BadCase(human(), {HOP_COUNT: str(2**63)}),
        BadCase(human(), {SENDER: "*"}),
        BadCase(human(), {SENDER: ">"}),
        BadCase(human(), {SENDER: "a.b"}),
        BadCase(b"", {}),
        BadCase(b"\x00\xff\xfe", {}),
    ]


def expected_reason(case: BadCase, sender_of: Callable[[BadCase], str]) -> str | None:
    """The dead-letter reason the runtime must give `case`, or None if it is valid input.

    `sender_of` reads the sender the way the receiving actor does (its subject, or the
    gate's header) and raises SubjectTokenError for one that is no token.
    """
    try:
        envelope = decode_envelope(case.payload, max_bytes=MAX_PAYLOAD)
    except DecodeError as exc:
        return f"decode_{exc.reason}"
    try:
        sender = sender_of(case)
        parse_trace_headers(case.headers, envelope.id, root_origin=sender)
    except HeaderError:
        return "bad_header"
    except SubjectTokenError:
        return "bad_sender"
    return None


def header_sender(case: BadCase) -> str:
    """The sender a delivered message names (the gate's header), checked as a token."""
    claimed = case.headers.get(SENDER, "")
    return check_token(claimed, "sender") if claimed else ""
