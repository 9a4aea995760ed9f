"""What `parley trace` and `parley calls` take: a trace id, a session id, or `last`."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from schemas import AuditRecord
from tools._trace_keys import (
    LAST,
    LAST_TRACE_FILE,
    named_key,
    records_of,
    remember_trace,
    traces_named,
)


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


def test_last_is_the_trace_this_directory_started_once_the_audit_has_it() -> None:
    assert traces_named(RECORDS, LAST, remembered="t1") == ["t1"]
    assert traces_named(RECORDS, LAST, remembered="t9") == []  # not recorded yet: wait


def test_a_trace_is_remembered_only_where_a_local_system_lives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    remember_trace("t1")
    assert not LAST_TRACE_FILE.exists()  # no `.parley/` here: nothing written
    (tmp_path / ".parley").mkdir()
    remember_trace("t1")
    remember_trace("t2")
    assert LAST_TRACE_FILE.read_text() == "t2\n"
    assert [p.name for p in (tmp_path / ".parley").iterdir()] == ["last-trace"]


def test_a_message_names_the_trace_last_stands_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`parley trace last` said `no trace or session last`: a reader could not check an id
    the message did not print."""
    monkeypatch.chdir(tmp_path)
    assert named_key("s1") == "session or trace s1"
    assert named_key(LAST) == "trace at all"  # nothing remembered here
    (tmp_path / ".parley").mkdir()
    remember_trace("t2")
    assert named_key(LAST) == "trace t2, the one the last command here started"
