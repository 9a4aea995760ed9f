"""Which traces a person means by what they type: a trace id, a session id, or `last`.

A person has a session id (`parley collab` prints it first) far more often than a trace id,
which no command prints; `parley trace` and `parley calls` take either, and `last` for the
trace started most recently, so the question "what just happened?" needs no id at all.

`last` is the trace the last command run in this directory started (`.parley/last-trace`,
written as it submits), not merely the newest in the audit: the auditor records a moment after
the gate decides, so straight after `parley delegate` the newest trace in the audit may still
be the one before. The reader waits a bounded while for the remembered trace's records; with
no such file (a command run elsewhere), `last` is the newest trace the audit holds.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Final

from schemas import AuditRecord
from tools._local import LOCAL_DIR

__all__ = (
    "LAST",
    "LAST_TRACE_FILE",
    "named_key",
    "read_for_key",
    "records_of",
    "remember_trace",
    "traces_named",
)

LAST_TRACE_FILE: Final = LOCAL_DIR / "last-trace"
CATCH_UP_S: Final = 10.0
"""How long `last` waits for the auditor to record the remembered trace."""
_POLL_S: Final = 0.2

LAST: Final = "last"
"""The key that names the trace started most recently (its first record is the newest)."""


def remember_trace(trace_id: str) -> None:
    """Note `trace_id` as this directory's last, when a local system lives here (`.parley/`);
    replaced at once, so a reader never sees half an id."""
    if not LOCAL_DIR.is_dir():
        return
    partial = LAST_TRACE_FILE.with_name(f"last-trace.{os.getpid()}")
    partial.write_text(trace_id + "\n")
    os.replace(partial, LAST_TRACE_FILE)


def _remembered() -> str | None:
    try:
        return LAST_TRACE_FILE.read_text().strip() or None
    except OSError:
        return None


def named_key(key: str) -> str:
    """What `key` names, for a message saying it was not found: `last` as the trace id it
    stands for here (a reader cannot check an id a message does not print)."""
    if key != LAST:
        return f"session or trace {key}"
    remembered = _remembered()
    if remembered is None:
        return "trace at all"
    return f"trace {remembered}, the one the last command here started"


def traces_named(
    records: Sequence[AuditRecord], key: str, remembered: str | None = None
) -> list[str]:
    """The trace ids `key` names in `records` (audit order), oldest first: `last`'s one (the
    `remembered` trace when given, else the newest), the trace `key` is, or the traces of the
    session `key` is; empty when none."""
    started = list(dict.fromkeys(r.trace_id for r in records if r.trace_id))
    if key == LAST:
        if remembered is not None:
            return [remembered] if remembered in started else []
        return started[-1:]
    if key in started:
        return [key]
    of_session = {r.trace_id for r in records if r.session_id == key and r.trace_id}
    return [trace for trace in started if trace in of_session]


def records_of(records: Iterable[AuditRecord], traces: Sequence[str]) -> list[AuditRecord]:
    """The records of `traces`, in audit order."""
    wanted = set(traces)
    return [r for r in records if r.trace_id in wanted]


async def read_for_key(
    read: Callable[[], Awaitable[list[AuditRecord]]], key: str
) -> tuple[list[AuditRecord], list[str]]:
    """The audit records `read` gives and the traces `key` names in them; for `last`, read
    again until the auditor has recorded the remembered trace, at most `CATCH_UP_S`."""
    remembered = _remembered() if key == LAST else None
    records = await read()
    traces = traces_named(records, key, remembered)
    if traces or remembered is None:
        return records, traces
    print(f"waiting for the auditor to record trace {remembered}…", file=sys.stderr)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CATCH_UP_S
    while not traces and loop.time() < deadline:
        await asyncio.sleep(_POLL_S)
        records = await read()
        traces = traces_named(records, key, remembered)
    return records, traces
