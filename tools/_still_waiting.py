"""A command that has waited a few seconds says what for, once (docs/cli.md).

A person who runs `parley collab` before `parley up` has started its router, or against a
server that does not answer, otherwise sees nothing until the command gives up a minute
later. `announced` prints one line on standard error once a wait has lasted
`NOTICE_AFTER_S`: what the command waits for and, when it has a limit, when it gives up;
and, when the broker has refused the command something meanwhile, that refusal, which may be
why the wait never ends (tools/_errors.py).
No spinner and no repeats: a wait that ends sooner prints nothing, so a fast run's output is
unchanged.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import Final, TextIO, TypeVar

from tools._errors import refused_so_far

__all__ = ("NOTICE_AFTER_S", "announced", "waiting_line")

NOTICE_AFTER_S: Final = 3.0
"""How long a wait lasts before the command says what it waits for."""

T = TypeVar("T")


def waiting_line(what: str, after_s: float, limit_s: float | None = None) -> str:
    """The line a wait prints: what for, how long so far, and when it gives up."""
    limit = f"; giving up after {limit_s:.0f} s" if limit_s is not None else ""
    return f"waiting for {what} ({after_s:.0f} s so far{limit})"


async def announced(
    awaitable: Awaitable[T],
    what: str,
    *,
    limit_s: float | None = None,
    after_s: float = NOTICE_AFTER_S,
    out: TextIO | None = None,
) -> T:
    """`awaitable`'s result; if it takes `after_s` seconds or more, `waiting_line` is printed
    once on `out` (standard error by default: a command's output stays its own)."""

    def say() -> None:
        line = waiting_line(what, after_s, limit_s)
        refused = refused_so_far()
        if refused is not None:  # the wait may never end: say why now, not at its end
            line = f"{line}; meanwhile {refused}"
        print(line, file=out or sys.stderr, flush=True)

    notice = asyncio.get_running_loop().call_later(after_s, say)
    try:
        return await awaitable
    finally:
        notice.cancel()
