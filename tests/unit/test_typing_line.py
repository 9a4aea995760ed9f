"""`parley say` and `parley collab`'s live line of an agent's answer (tools/_typing_line.py)."""

from __future__ import annotations

import io

from schemas import LlmChunk, encode
from tools._typing_line import TypingLine

WIPE = "\r\033[K"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def chunk(text: str, index: int, *, done: bool = False, request: str = "r1") -> bytes:
    return encode(LlmChunk(request_id=request, index=index, text=text, done=done, agent="gpt"))


def test_the_answer_is_redrawn_as_it_comes_and_wiped_for_the_durable_line() -> None:
    out = Terminal()
    line = TypingLine(out)
    line.received(chunk("The plan ", 0))
    line.received(chunk("is ready", 1))
    line.received(chunk("", 2, done=True))
    drawn = out.getvalue().split(WIPE)
    assert drawn == ["", "gpt is writing: The plan ", "gpt is writing: The plan is ready"]
    line.wipe()
    print("[gpt · 1/3] The plan is ready", file=out)
    screen = out.getvalue().split(WIPE)[-1]
    assert screen == "[gpt · 1/3] The plan is ready\n"  # what the terminal shows: one line


def test_a_finished_call_is_never_drawn_again_and_bad_chunks_are_ignored() -> None:
    out = Terminal()
    line = TypingLine(out)
    line.received(chunk("done text", 0, done=True))
    line.wipe()
    before = out.getvalue()
    line.received(chunk(" late", 1))  # after its last piece: not drawn
    line.received(b"not json")
    line.received(chunk("", 0))  # nothing to show yet
    assert out.getvalue() == before
    line.received(chunk("Next", 0, request="r2"))
    assert out.getvalue().endswith(f"{WIPE}gpt is writing: Next")


def test_a_pipe_gets_no_live_line() -> None:
    out = io.StringIO()
    line = TypingLine(out)
    line.received(chunk("text", 0))
    line.wipe()
    assert not line.live and out.getvalue() == ""
