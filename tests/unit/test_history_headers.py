"""The history reader's header parsing gives exactly what nats-py's own gives, for any bytes.

`bus._history.parse_header_lines` takes the place of nats-py's `_parse_header_lines` on a
connection that reads history (it is over half of what a stored message cost to read); a
message's headers must not change by being read faster. nats-py's own method is the oracle.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from nats.aio.client import Client

from bus._history import parse_header_lines

DIRECT_GET = (
    b"Nats-Stream: PARLEY_AUDIT\r\nNats-Subject: parley.audit.demo.gpt\r\n"
    b"Nats-Sequence: 1234\r\nNats-Time-Stamp: 2026-11-28T16:00:00.123456789Z\r\n"
    b"Nats-Num-Pending: 17\r\nNats-Last-Sequence: 1233\r\nNats-Msg-Id: r1@epoch\r\n\r\n"
)
AWKWARD = [
    DIRECT_GET,
    b"",
    b"\r\n\r\n",
    b"NoColonHere\r\nA:b\r\n",
    b"Name:Value\r\nName2:\tValue2 \r\n",
    b"Spaced Name: x\r\nTabbed\tName: y\r\n\x1cSep: z\r\nok: 1\r\n",
    b"Caf\xc3\xa9: non-ascii name\r\nKey: caf\xc3\xa9\r\nBad: \xff\xfe\r\n",
    b": empty name\r\n  : spaces only\r\nDup: 1\r\nDup: 2\r\n",
    b"Key: value: with: colons\r\n\r\nAfter-Blank: still parsed\r\n",
    b"Trailing: cr\rnot-a-line-end\r\nLf: only\nhere\r\n",
]
_PIECES = st.sampled_from(
    [
        b"\r\n",
        b":",
        b" ",
        b"\t",
        b"\x1c",
        b"\x0b",
        b"\x85",
        b"\xc3\xa9",
        b"\xff",
        b"Nats-",
        b"a",
        b"1",
    ]
)


def test_awkward_header_blocks_parse_as_nats_py_parses_them() -> None:
    for raw in AWKWARD:
        assert parse_header_lines(raw) == Client._parse_header_lines(raw), raw


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.binary(max_size=6)), max_size=40))
def test_any_bytes_parse_as_nats_py_parses_them(pieces: list[bytes]) -> None:
    raw = b"".join(pieces)
    assert parse_header_lines(raw) == Client._parse_header_lines(raw)


_ASCII = st.binary(max_size=6).map(lambda raw: bytes(b % 128 for b in raw))


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(_PIECES.filter(bytes.isascii), _ASCII), max_size=40))
def test_any_ascii_bytes_parse_as_nats_py_parses_them(pieces: list[bytes]) -> None:
    """Headers are nearly always ASCII, which has a path of its own."""
    raw = b"".join(pieces)
    assert parse_header_lines(raw) == Client._parse_header_lines(raw)
