"""Which traces a person means by what they type: a trace id, a session id, or `last`.

A person has a session id (`parley collab` prints it first) far more often than a trace id,
which no command prints; `parley trace` and `parley calls` take either, and `last` for the
trace started most recently, so the question "what just happened?" needs no id at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from schemas import AuditRecord

__all__ = ("LAST", "records_of", "traces_named")

LAST: Final = "last"
"""The key that names the trace started most recently (its first record is the newest)."""


def traces_named(records: Sequence[AuditRecord], key: str) -> list[str]:
    """The trace ids `key` names in `records` (audit order), oldest first: `last`'s one, the
    trace `key` is, or the traces of the session `key` is; empty when none."""
    started = list(dict.fromkeys(r.trace_id for r in records if r.trace_id))
    if key == LAST:
        return started[-1:]
    if key in started:
        return [key]
    of_session = {r.trace_id for r in records if r.session_id == key and r.trace_id}
    return [trace for trace in started if trace in of_session]


def records_of(records: Iterable[AuditRecord], traces: Sequence[str]) -> list[AuditRecord]:
    """The records of `traces`, in audit order."""
    wanted = set(traces)
    return [r for r in records if r.trace_id in wanted]
