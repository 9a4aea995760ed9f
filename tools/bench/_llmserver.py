"""The llm row's provider: a local server streaming OpenAI's chat-completions format.

Run as a process of its own (`python -c ...serve()`), it prints `ready <port>` and answers every
POST with `text/event-stream`: the first chunk (the role and the first word) 50 ms after the
request, then 100 chunks of one word each 5 ms apart, then the finish reason, the usage
(`stream_options.include_usage`) and `data: [DONE]`. Each chunk is one HTTP/1.1 chunk, written
when due; the pauses play a provider's pace, they wait for nothing. Asked for the model
`LONG_MODEL`, it streams the long answer of tools/bench/_llmlong.py instead, without pauses.
"""

from __future__ import annotations

import asyncio
import json
import time

from tools.bench._llmlong import LONG_MODEL, long_pieces

__all__ = ("CHUNKS", "FIRST_S", "GAP_S", "WORDS", "serve")

FIRST_S = 0.050
GAP_S = 0.005
CHUNKS = 100
WORDS = [f"w{i} " for i in range(CHUNKS + 1)]
"""The answer's words: the first chunk's, then one per later chunk."""

_HEAD = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": "m"}


def _event(delta: dict[str, object], finish: str | None = None, usage: object = None) -> bytes:
    choices = [{"index": 0, "delta": delta, "finish_reason": finish}] if delta or finish else []
    data = json.dumps({**_HEAD, "choices": choices, "usage": usage}).encode()
    event = b"data: " + data + b"\n\n"
    return f"{len(event):x}\r\n".encode() + event + b"\r\n"


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            asked = time.monotonic()
            length = 0
            for line in head.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            body = await reader.readexactly(length)
            long = json.loads(body).get("model") == LONG_MODEL
            pieces = long_pieces() if long else WORDS
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            for index, word in enumerate(pieces):
                if not long:
                    due = asked + FIRST_S + index * GAP_S
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                delta: dict[str, object] = {"content": word}
                if index == 0:
                    delta["role"] = "assistant"
                writer.write(_event(delta))
                await writer.drain()
            usage = {
                "prompt_tokens": 5,
                "completion_tokens": len(pieces),
                "total_tokens": 5 + len(pieces),
            }
            writer.write(_event({}, "stop") + _event({}, usage=usage))
            done = b"data: [DONE]\n\n"
            writer.write(f"{len(done):x}\r\n".encode() + done + b"\r\n0\r\n\r\n")
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def serve() -> None:
    """Serve on a free loopback port until killed."""
    server = await asyncio.start_server(_answer, "127.0.0.1", 0)
    print(f"ready {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()
