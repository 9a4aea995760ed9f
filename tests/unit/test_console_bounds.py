"""Issue 30, Build item 6: the console's bounds on what it reads and what it keeps.

`parse_bounded` counts a body's nesting before parsing it (brackets in strings are text), and
`SignIns` keeps at most `max_per_person` live sign-ins per person, revoking the oldest.
"""

from __future__ import annotations

import json
import time

import pytest

from actors.console._bounds import TooDeep, TooLarge, nesting_depth_over, parse_bounded
from actors.console._tokens import MAX_SIGN_INS_PER_PERSON, SignIns


def test_a_body_nested_past_the_bound_is_refused_before_parsing() -> None:
    with pytest.raises(TooDeep):
        parse_bounded("[" * 100_000)
    with pytest.raises(TooDeep):
        parse_bounded(b'{"a":' * 33 + b"1" + b"}" * 33)
    assert parse_bounded(b'{"a":' * 32 + b"1" + b"}" * 32) is not None


def test_brackets_inside_strings_are_text() -> None:
    request = {"jsonrpc": "2.0", "id": 1, "method": "StartTask", "params": {"p": '[{"[' * 500}}
    assert parse_bounded(json.dumps(request)) == request
    escaped = json.dumps(['\\"[[[', '"]]]"'] * 50)
    assert not nesting_depth_over(escaped.encode(), 1)


def test_a_body_over_the_size_bound_is_refused_unread() -> None:
    with pytest.raises(TooLarge):
        parse_bounded(b" " * 11, max_bytes=10)
    with pytest.raises(ValueError, match="Expecting"):  # within both bounds, still not JSON
        parse_bounded(b"{not json")


def test_the_scan_stays_linear_on_escaped_quotes_in_an_unterminated_string() -> None:
    """A string pattern that can fail retries at every escaped quote inside the string:
    quadratic, over a minute for 80 KB. This one matches at every quote it starts from: a
    mebibyte of them is read in well under a second, even on a busy machine."""
    body = b'"' + b'\\"' * 500_000
    started = time.monotonic()
    assert not nesting_depth_over(body, 32)
    assert time.monotonic() - started < 5.0


def test_a_sign_in_flood_keeps_the_newest_sign_ins_only() -> None:
    """2,000 sign-ins with one person's token: 20 live tokens, the newest; others' untouched."""
    sign_ins = SignIns()
    bobs = sign_ins.open("bob")
    tokens = [sign_ins.open("alice") for _ in range(2000)]
    assert sign_ins.live("alice") == MAX_SIGN_INS_PER_PERSON == 20
    assert sign_ins.live() == MAX_SIGN_INS_PER_PERSON + 1
    kept = tokens[-MAX_SIGN_INS_PER_PERSON:]
    assert all(sign_ins.person_of(token) is None for token in tokens[:-MAX_SIGN_INS_PER_PERSON])
    assert all(sign_ins.person_of(token) == "alice" for token in kept)
    assert sign_ins.person_of(bobs) == "bob"


def test_the_cap_is_a_setting() -> None:
    sign_ins = SignIns(max_per_person=2)
    first, second, third = (sign_ins.open("alice") for _ in range(3))
    assert [sign_ins.person_of(t) for t in (first, second, third)] == [None, "alice", "alice"]
