"""What `parley trace` and `parley calls` take: a trace id, a session id, or `last`."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas import AuditRecord
from tools._trace_keys import LAST, records_of, traces_named


def _record(trace: str, session: str = "") -> AuditRecord:
    return AuditRecord(
        id=f"{trace}-{session}",
        created_at=datetime(2026, 11, 28, tzinfo=UTC),
        tenant="demo",
        profile="gate",
        fact="decision",
        trace_id=trace,
        session_id=session,
    )


RECORDS = [
    _record("t1", "s1"),
    _record("t2", "s2"),
    _record("t1", "s1"),
    _record("t3", "s1"),  # a second trace of session s1 (a control, say)
    _record("t2"),
]


def test_a_trace_id_names_itself() -> None:
    assert traces_named(RECORDS, "t2") == ["t2"]


def test_a_session_id_names_each_of_its_traces_in_order() -> None:
    assert traces_named(RECORDS, "s1") == ["t1", "t3"]
    assert [r.trace_id for r in records_of(RECORDS, ["t1"])] == ["t1", "t1"]


def test_last_is_the_trace_started_most_recently_not_the_last_record() -> None:
    assert traces_named(RECORDS, LAST) == ["t3"]


def test_nothing_matches_an_unknown_key_or_an_empty_history() -> None:
    assert traces_named(RECORDS, "nope") == []
    assert traces_named([], LAST) == []
