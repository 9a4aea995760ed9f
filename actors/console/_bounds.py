"""What the console reads of a body before it parses it: its size, then its nesting.

Python's `json` parser recurses once per nested array or object, so a body of 100,000 `[`
(100 KB, well under the size bound) exhausts the interpreter's recursion limit: a
`RecursionError`, which no `ValueError` handler catches, becomes an HTTP 500 and a logged
traceback for every such request. A JSON-RPC request of this API is a few levels deep, so
`parse_bounded` counts the nesting first with a scan that does not recurse (strings removed,
brackets counted, stopping at the first level over the bound) and parses only a body within
both bounds. Callers answer `TooLarge` as JSON-RPC's invalid request (-32600) and `TooDeep`,
like any other body that does not parse, as its parse error (-32700).
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ("MAX_BODY_BYTES", "MAX_JSON_DEPTH", "TooDeep", "TooLarge", "parse_bounded")

MAX_BODY_BYTES: Final = 1 << 20
"""The largest request body or WebSocket frame read (the bus's own envelope limit)."""
MAX_JSON_DEPTH: Final = 32
"""The deepest nesting of arrays and objects a body may have. The deepest request of this API
(a batch of `CreateSession` calls with their options) is five levels."""

_STRING: Final = re.compile(rb'"(?:[^"\\]++|\\.?)*+(?:"|\Z)', re.DOTALL)
"""A JSON string, or an unterminated one to the end of the body. Possessive, and matching at
every quote it starts from, so it never backtracks into a string or retries at a quote
inside one: linear in the body, whatever its escapes (a pattern that can fail on an
unterminated string retries at each escaped quote in it, quadratic time)."""
_NOT_BRACKETS: Final = bytes(sorted(set(range(256)) - set(b"[]{}")))
_OPENING: Final = frozenset(b"[{")


class TooLarge(ValueError):
    """The body is over `MAX_BODY_BYTES`."""


class TooDeep(ValueError):
    """The body nests arrays and objects deeper than `MAX_JSON_DEPTH`."""


def nesting_depth_over(body: bytes, limit: int) -> bool:
    """Whether `body` nests arrays and objects deeper than `limit`, brackets inside strings
    not counted. Linear in the body, recursion-free, and it stops at the first level past
    `limit`."""
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    depth = 0
    for bracket in brackets:
        if bracket in _OPENING:
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def parse_bounded(
    body: bytes | str, *, max_bytes: int = MAX_BODY_BYTES, max_depth: int = MAX_JSON_DEPTH
) -> Any:
    """The JSON value of `body`, parsed only once it is within both bounds.

    Raises:
        TooLarge: over `max_bytes`.
        TooDeep: nested deeper than `max_depth`.
        ValueError: not JSON (json.JSONDecodeError, or undecodable UTF-8).
    """
    raw = body.encode() if isinstance(body, str) else body
    if len(raw) > max_bytes:
        raise TooLarge(f"body of {len(raw)} bytes is over the limit of {max_bytes}")
    if nesting_depth_over(raw, max_depth):
        raise TooDeep(f"body nests arrays and objects deeper than {max_depth} levels")
    return json.loads(raw)
