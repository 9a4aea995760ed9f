"""What the person sees of a model call's answer while it is written: the agent's `message`.

An agent's brain answers with its reply as JSON (`{"message": …, "handoff": …, "final": …}`,
actors/agent/_prompt.py), so the text a provider streams is that JSON, written a few
characters at a time. A person should read what the agent says, not its JSON: `MessageReader`
reads the text as it comes and gives the characters of the top-level `message` string as soon
as they are written, its escapes decoded (a `\\n`, a `\\u00e9`, a surrogate pair, each one
possibly cut between two pieces). Everything else is never shown: text before the object
opens (a code fence), the other fields, whatever follows the object. An answer that is not a
JSON object with a `message` string shows nothing while written; its durable turn says it.

`TypingSender` sends what the reader gives, as `llm_chunk`s naming the agent, on the typing
subject of the person whose session the call works in (`Namespace.typing`), which the gate
named in the delivery's headers (actors/gate/_roles.py). It is fed the text the agent's own
chunks carry (actors/llm/_chunks.py), so the same guardrails hold back and redact it. Core
NATS, fire and forget: a chunk lost is lost, the person's durable turn is the answer.
"""

from __future__ import annotations

from typing import Final

import msgspec
from nats.aio.client import Client as NATS

from schemas import LlmChunk

__all__ = ("MessageReader", "TypingSender")

_ENCODER = msgspec.json.Encoder()
_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
_SHOWN: Final = "message"


class MessageReader:
    """The top-level `message` string of a JSON object, given as it is written."""

    def __init__(self) -> None:
        self._depth = 0
        self._ended = False  # the object closed: nothing after it is read
        self._in_string = False
        self._escaped = False
        self._hex: str | None = None  # the digits of a \\u escape read so far
        self._high = ""  # a high surrogate waiting for its low half
        self._string = ""  # the key being read (top level only)
        self._role = ""  # what the string being read is: "key", "message" or ""
        self._wants_key = False
        self._key = ""  # the top-level key whose value comes next
        self._shown = False  # the message was read to its end: one message only

    def feed(self, piece: str) -> str:
        """Read `piece`; the characters of the message it completes (maybe none)."""
        out: list[str] = []
        for char in piece:
            if self._ended:
                break
            if self._in_string:
                self._string_char(char, out)
            else:
                self._structure_char(char)
        return "".join(out)

    def _structure_char(self, char: str) -> None:
        if self._depth == 0:
            if char == "{":  # anything before the object (a fence, spaces) is skipped
                self._depth, self._wants_key = 1, True
            return
        if char == '"':
            self._in_string, self._string = True, ""
            top = self._depth == 1
            if top and self._wants_key:
                self._role = "key"
            elif top and self._key == _SHOWN and not self._shown:
                self._role = _SHOWN
            else:
                self._role = ""
        elif char in "{[":
            self._depth += 1
        elif char in "}]":
            self._depth -= 1
            self._ended = self._depth == 0
        elif self._depth == 1 and char == ":":
            self._wants_key = False
        elif self._depth == 1 and char == ",":
            self._wants_key, self._key = True, ""

    def _string_char(self, char: str, out: list[str]) -> None:
        if self._hex is not None:
            self._hex += char
            if len(self._hex) == 4:
                code, self._hex = int(self._hex, 16) if _is_hex(self._hex) else 0xFFFD, None
                self._add(self._from_code(code), out)
        elif self._escaped:
            self._escaped = False
            if char == "u":
                self._hex = ""
            else:
                self._add(_ESCAPES.get(char, char), out)
        elif char == "\\":
            self._escaped = True
        elif char == '"':
            self._in_string = False
            if self._role == "key":
                self._key = self._string
            elif self._role == _SHOWN:
                self._shown = True
        else:
            self._add(char, out)

    def _from_code(self, code: int) -> str:
        if 0xD800 <= code < 0xDC00:
            self._high = chr(code)
            return ""
        if 0xDC00 <= code < 0xE000 and self._high:
            high, self._high = self._high, ""
            return (high + chr(code)).encode("utf-16", "surrogatepass").decode("utf-16")
        self._high = ""
        return chr(code) if not 0xD800 <= code < 0xE000 else "\ufffd"

    def _add(self, text: str, out: list[str]) -> None:
        if self._role == "key":
            self._string += text
        elif self._role == _SHOWN:
            out.append(text)


def _is_hex(digits: str) -> bool:
    return all(d in "0123456789abcdefABCDEF" for d in digits)


class TypingSender:
    """The visible text of one model call's answer, to the person whose session it is in."""

    def __init__(self, nc: NATS, subject: str, request_id: str, agent: str) -> None:
        self._nc, self._subject = nc, subject
        self._request_id, self._agent = request_id, agent
        self._reader = MessageReader()
        self._index = 0

    async def text(self, piece: str, *, done: bool) -> None:
        """The agent's chunks carried `piece`: send what of it the person may read."""
        shown = self._reader.feed(piece)
        if not (shown or done):
            return
        chunk = LlmChunk(
            request_id=self._request_id,
            index=self._index,
            text=shown,
            done=done,
            agent=self._agent,
        )
        self._index += 1
        await self._nc.publish(self._subject, _ENCODER.encode(chunk))
