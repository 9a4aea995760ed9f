"""The llm row's long answer: what the LLM gateway's CPU pays to stream 200 KB.

The gateway guards the text of a streamed answer before each chunk goes out, and the
guardrails read the whole text so far each time (actors/llm/_chunks.py). This figure streams
one answer of `LONG_CHARS` characters in `LONG_PIECE`-character pieces (50,000 pieces, written
by the provider as fast as it can) through the same gate and gateway as the row's calls, and
reads the gateway process's CPU time before and after it (Linux's /proc/<pid>/stat; elsewhere
the figure is left out). For scale, not judged: guarded at every piece, the same answer kept
the gateway busy past its 60 s deadline (docs/benchmarks.md).
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

__all__ = ("LONG_CHARS", "LONG_MODEL", "LONG_PIECE", "long_figure", "long_pieces", "print_long")

LONG_MODEL = "bench-long"
"""The model the provider answers at length (every other model: the row's short answer)."""
LONG_CHARS = 200_000
LONG_PIECE = 4
LONG_WAIT_S = 120.0
"""How long the figure waits for the answer: past the gateway's own 60 s deadline."""


def long_pieces() -> list[str]:
    """The long answer, as the provider streams it: words, cut every `LONG_PIECE` characters."""
    words = "".join(f"word{i} of a long answer. " for i in range(LONG_CHARS // 16))
    text = words[:LONG_CHARS]
    return [text[i : i + LONG_PIECE] for i in range(0, len(text), LONG_PIECE)]


def _cpu_s(pid: int | None) -> float | None:
    """The user and system CPU seconds process `pid` has used (None: not known here)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def long_figure(
    call: Callable[[float], Awaitable[tuple[float, float]]], gateway_pid: int | None
) -> dict[str, Any]:
    """One long streamed call: its wall time, the gateway's CPU for it, and whether it was
    answered whole (`call` takes how long to wait for the answer)."""
    before = _cpu_s(gateway_pid)
    started = time.perf_counter()
    try:
        await call(LONG_WAIT_S)
        outcome = "answered whole"
    except (RuntimeError, TimeoutError) as exc:
        outcome = str(exc)[:160] or f"no answer within {LONG_WAIT_S:g} s"
    wall = time.perf_counter() - started
    after = _cpu_s(gateway_pid)
    cpu = after - before if after is not None and before is not None else None
    return {
        "chars": LONG_CHARS,
        "pieces": len(long_pieces()),
        "wall_s": wall,
        "gateway_cpu_s": cpu,
        "outcome": outcome,
    }


def print_long(figure: dict[str, Any]) -> None:
    cpu = figure["gateway_cpu_s"]
    spent = f"gateway CPU {cpu:.2f} s" if cpu is not None else "gateway CPU not measured here"
    print(
        f"llm: a {figure['chars'] // 1000} KB answer in {figure['pieces']} pieces: {spent}, "
        f"{figure['wall_s']:.2f} s to the answer, {figure['outcome']}"
    )
