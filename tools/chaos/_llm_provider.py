"""The LLM mix's provider (`parley chaos --llm N`): a local server streaming OpenAI's chat
completions slowly, and saying when each stream starts and ends, so the run can SIGKILL the
gateway while one is being written.

Run as a process of its own (`serve(LOG)`, tools/chaos/_llm_mix.py), beside the run's
actors and never one of the schedule's targets (it plays the provider, outside Parley). It
prints `ready <port>` and answers every POST with `text/event-stream`: an agent's reply in
seed 001's JSON (`{"message": ..., "final": true}`), written `PIECES` chunks `GAP_S` apart,
then the finish reason, the usage and `data: [DONE]`, each chunk one HTTP/1.1 chunk written
when due (the pauses play a provider's pace; they wait for nothing).

It appends one line to LOG per stream: `started <n>` when asked, then `done <n>` once the
last chunk is written, or `cut <n>` when the client went away before it (a gateway killed
mid-stream). The checker counts them (tools/chaos/_llm_check.py). It prints the same lines
after `ready <port>`: the run holds each of the gateway's kills until a stream is being
written (tools/chaos/_llm_mix.py `Provider.before_fault`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from pathlib import Path
from typing import TextIO

from tools._openai_stream import STREAM_HEAD, read_request, stream_end, text_event

__all__ = ("GAP_S", "PIECES", "REPLY", "count_streams", "serve")

PIECES = 30
GAP_S = 0.05
"""A stream takes PIECES x GAP_S (1.5 s): a kill sent when one starts lands well inside it."""
REPLY = json.dumps({"message": "narrator streamed this answer, " + "word " * 40, "final": True})
"""What every stream writes: a reply the agent's brain reads as a final answer."""
USAGE = {"prompt_tokens": 40, "completion_tokens": 60, "total_tokens": 100}
_NAME = "chatcmpl-chaos"


def _pieces(text: str, count: int) -> list[str]:
    size = -(-len(text) // count)
    return [text[start : start + size] for start in range(0, len(text), size)]


class _Provider:
    def __init__(self, log: TextIO) -> None:
        self._log = log
        self._numbers = itertools.count(1)

    def _note(self, what: str, number: int) -> None:
        self._log.write(f"{what} {number}\n")
        self._log.flush()
        print(f"{what} {number}", flush=True)  # the run waits on these to kill mid-stream

    async def answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = 0
        try:
            while True:
                await read_request(reader)
                asked = time.monotonic()
                number = next(self._numbers)
                self._note("started", number)
                writer.write(STREAM_HEAD)
                for index, piece in enumerate(_pieces(REPLY, PIECES)):
                    await asyncio.sleep(max(0.0, asked + index * GAP_S - time.monotonic()))
                    writer.write(text_event(_NAME, index, piece))
                    await writer.drain()
                writer.write(stream_end(_NAME, USAGE))
                await writer.drain()
                self._note("done", number)
                number = 0
        except (ConnectionError, asyncio.IncompleteReadError):
            if number:  # the client went away with the stream still being written
                self._note("cut", number)
        finally:
            writer.close()


async def serve(log_path: Path) -> None:
    """Serve on a free loopback port until killed, noting each stream in `log_path`."""
    with log_path.open("a") as log:
        server = await asyncio.start_server(_Provider(log).answer, "127.0.0.1", 0)
        print(f"ready {server.sockets[0].getsockname()[1]}", flush=True)
        async with server:
            await server.serve_forever()


def count_streams(log_path: Path) -> dict[str, int]:
    """How many streams the provider started, finished and saw cut (`started`, `done`, `cut`)."""
    found = {"started": 0, "done": 0, "cut": 0}
    if log_path.exists():
        for line in log_path.read_text(errors="replace").splitlines():
            what = line.split(" ", 1)[0]
            if what in found:
                found[what] += 1
    return found
