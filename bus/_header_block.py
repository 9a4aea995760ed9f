"""A message's header block built in one pass, byte for byte what nats-py would send.

nats-py builds the block of every publish with headers line by line: for each header it strips
and checks the key against its pattern, strips the value, replaces its line breaks and appends
six pieces to a bytearray. The gate sends two messages of six or seven headers for every
envelope it admits (the delivery and the decision), and that loop was about 7 µs of each,
more than all of the gate's own work on a decision.

`header_block()` joins the lines at once instead, for headers whose keys nats-py has already
accepted on this connection (a handful: Parley's own names) and whose values need nothing
replaced; anything else (a key not seen yet, a value with a line break left after stripping)
is left to nats-py's own loop, which also raises its `BadHeaderError` for a bad key. What
goes on the wire is the same either way (tests/unit/test_header_block.py compares them).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ("KnownKeys", "header_block")

_STATUS_LINE = b"NATS/1.0\r\n"
_END = b"\r\n"
_MAX_KEYS = 256
"""Header names remembered per connection: Parley sends a few dozen; more are handled by
nats-py's loop as before."""


class KnownKeys:
    """Header names nats-py accepted as they are (non-empty, nothing to strip, its pattern)."""

    __slots__ = ("keys",)

    def __init__(self) -> None:
        self.keys: set[str] = set()

    def learn(self, headers: Mapping[str, str]) -> None:
        """Remember the names of `headers`, which nats-py has just sent without complaint."""
        for key in headers:
            if len(self.keys) >= _MAX_KEYS:
                return
            # Exactly `str`: a str enum (nats-py's own `api.Header.MSG_TTL`) encodes as its
            # value in nats-py's loop but formats as its name ("Header.MSG_TTL") in a string.
            if type(key) is str and key and key == key.strip():
                self.keys.add(key)


def header_block(headers: Mapping[str, str], known: KnownKeys) -> bytes | None:
    """The header block nats-py would send for `headers`, or None to let nats-py build it."""
    if not known.keys.issuperset(headers) or any(type(key) is not str for key in headers):
        return None  # a key equal to a known name may still be a str enum: see `learn`
    if any(type(value) is not str for value in headers.values()):
        return None
    lines = "".join([f"{key}: {value.strip()}\r\n" for key, value in headers.items()])
    count = len(headers)
    if lines.count("\n") != count or lines.count("\r") != count:
        return None  # a line break inside a value: nats-py replaces it with a space
    return _STATUS_LINE + lines.encode() + _END
