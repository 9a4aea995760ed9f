"""The connection's one-pass header block sends what nats-py's own loop sends, byte for byte.

The runtime's connection (bus/_barrier_client.py) builds the header block of a publish itself
where it can (bus/_header_block.py); this compares the bytes it queues with those nats-py's
own `_send_publish` queues for the same publishes, including the headers it leaves to nats-py
(whitespace to strip, line breaks inside a value, keys it has not accepted yet, bad keys).
"""

from __future__ import annotations

import pytest
from nats.aio.client import Client as NATS
from nats.errors import BadHeaderError
from nats.js import api

from bus._barrier_client import BarrierClient
from bus._header_block import KnownKeys, header_block

_PARLEY = {
    "Nats-Msg-Id": "0192aaaa-bbbb-8ccc-9ddd-eeeeffff0000",
    "Parley-Trace-Id": "0192aaaa-bbbb-7ccc-9ddd-eeeeffff0001",
    "Parley-Hop-Count": "2",
    "Parley-Causation-Id": "",
    "Parley-Origin": "alice",
    "traceparent": "00-0192aaaabbbb7ccc9dddeeeeffff0001-9dddeeeeffff0000-01",
    "Parley-Sender": "gate",
}
_CASES = [
    _PARLEY,
    {"Nats-Expected-Last-Subject-Sequence": "0"},
    {"Parley-Origin": "  padded  ", "Parley-Sender": "gate"},
    {"Parley-Origin": "two\r\nlines", "Parley-Sender": "gate\n"},
    {"Parley-Origin": "é ü € 😀"},
    {" Nats-Msg-Id ": "spaced key", "": "empty key", "Parley-Sender": "gate"},
    # nats-py's own key for a message's TTL is a str enum: it encodes as "Nats-TTL" in
    # nats-py's loop and formats as "Header.MSG_TTL" (the bytes a TTL'd write once carried).
    {"Nats-Rollup": "sub", api.Header.MSG_TTL: "1"},
    {"Nats-Rollup": "sub", "Nats-TTL": "1"},
]


async def _queued(client: NATS, headers: dict[str, str], own: bool) -> bytes:
    client._pending = []
    if own:
        await client._send_publish("a.b", "_INBOX.r.1", b"payload", 7, headers)
    else:  # nats-py's own loop, on the same client
        await NATS._send_publish(client, "a.b", "_INBOX.r.1", b"payload", 7, headers)
    (command,) = client._pending
    return bytes(command)


@pytest.mark.parametrize("headers", _CASES)
async def test_every_publish_queues_the_bytes_nats_py_would(headers: dict[str, str]) -> None:
    client = BarrierClient()
    first = await _queued(client, headers, own=True)  # keys not known yet: nats-py's loop
    again = await _queued(client, headers, own=True)  # known now: the one-pass block
    reference = await _queued(client, headers, own=False)
    assert first == again == reference


async def test_known_keys_take_the_one_pass_block_and_odd_values_do_not() -> None:
    known = KnownKeys()
    assert header_block(_PARLEY, known) is None  # nothing accepted yet
    known.learn(_PARLEY)
    block = header_block(_PARLEY, known)
    assert block is not None and block.startswith(b"NATS/1.0\r\nNats-Msg-Id: 0192")
    assert header_block({"Parley-Origin": "two\r\nlines"}, known) is None
    assert header_block({"Parley-Origin": "  padded  "}, known) == (
        b"NATS/1.0\r\nParley-Origin: padded\r\n\r\n"
    )
    known.learn({" spaced ": "x", "": "y"})
    assert " spaced " not in known.keys and "" not in known.keys


async def test_a_bad_key_is_still_refused_by_nats_py() -> None:
    client = BarrierClient()
    with pytest.raises(BadHeaderError):
        await client._send_publish("a.b", "", b"x", 1, {"bad key": "v"})
    assert "bad key" not in client._known_keys.keys
