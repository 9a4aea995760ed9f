"""An agent's answer on a terminal as it is written, for `parley say` and `parley collab`.

The LLM gateway sends the person whose session it is the agent's message as the model writes
it (`Namespace.typing`, actors/llm/_typing.py). `TypingLine` shows it on one line at the bottom
of the terminal, `<agent> is writing: …`, redrawn as each piece comes (the end of the text,
as much as fits the terminal's width), and wiped just before the next line is printed: the
durable turn (`[gpt · 1/3] …`) then takes its place, printed as it always was, so nothing is
said twice. Output that is not a terminal (a pipe, a file) gets no typing line at all: it
reads exactly as before.

A call's last piece (`done`) comes before its answer leaves the gateway, so before the turn
is printed; a call done is never drawn again. Best effort: a piece lost on the way only
leaves the line short; the turn itself comes from the durable timeline.
"""

from __future__ import annotations

import re
import shutil
from typing import Final, TextIO

import msgspec

from schemas import LlmChunk
from tools._terminal_text import terminal_safe

__all__ = ("TypingLine",)

_WIPE: Final = "\r\033[K"
_SPACES: Final = re.compile(r"\s+")
_DECODER = msgspec.json.Decoder(LlmChunk)
_KEEP_DONE: Final = 64
"""How many finished calls are remembered, so a late piece of one is not drawn again."""


class TypingLine:
    """The live line of the text being written, on a terminal."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self.live = out.isatty()
        self._request = ""
        self._agent = ""
        self._text = ""
        self._drawn = False
        self._finished: list[str] = []

    def received(self, data: bytes) -> None:
        """A chunk came on the typing subject: draw it (a malformed one is ignored)."""
        if not self.live:
            return
        try:
            chunk = _DECODER.decode(data)
        except msgspec.DecodeError:
            return
        if chunk.request_id in self._finished:
            return
        if chunk.request_id != self._request:
            self._request, self._agent, self._text = chunk.request_id, chunk.agent, ""
        self._text += chunk.text
        if chunk.text and self._text.strip():
            self._draw()
        if chunk.done:
            self._finish(chunk.request_id)

    def wipe(self) -> None:
        """A durable line is about to be printed: clear the live line (a call still being
        written is drawn again below it with its next piece)."""
        if self._drawn:
            self._out.write(_WIPE)
            self._out.flush()
            self._drawn = False

    def _draw(self) -> None:
        head = f"{self._agent or 'the agent'} is writing: "
        width = max(shutil.get_terminal_size().columns - 1, len(head) + 10)
        flat = terminal_safe(_SPACES.sub(" ", self._text).lstrip())  # one line, shown safely
        room = width - len(head)
        shown = flat if len(flat) <= room else "…" + flat[-(room - 1) :]
        self._out.write(f"{_WIPE}{head}{shown}")
        self._out.flush()
        self._drawn = True

    def _finish(self, request_id: str) -> None:
        if request_id not in self._finished:
            self._finished = [*self._finished[-(_KEEP_DONE - 1) :], request_id]
