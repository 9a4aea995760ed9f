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

from tools._openai_stream import STREAM_HEAD, read_request, stream_end, text_event
from tools.bench._llmlong import LONG_MODEL, long_pieces

__all__ = ("CHUNKS", "FIRST_S", "GAP_S", "WORDS", "serve")

FIRST_S = 0.050
GAP_S = 0.005
CHUNKS = 100
WORDS = [f"w{i} " for i in range(CHUNKS + 1)]
"""The answer's words: the first chunk's, then one per later chunk."""

_NAME = "chatcmpl-bench"


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            body = await read_request(reader)
            asked = time.monotonic()
            long = json.loads(body).get("model") == LONG_MODEL
            pieces = long_pieces() if long else WORDS
            writer.write(STREAM_HEAD)
            for index, word in enumerate(pieces):
                if not long:
                    due = asked + FIRST_S + index * GAP_S
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                writer.write(text_event(_NAME, index, word))
                await writer.drain()
            usage = {
                "prompt_tokens": 5,
                "completion_tokens": len(pieces),
                "total_tokens": 5 + len(pieces),
            }
            writer.write(stream_end(_NAME, usage))
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
