"""`parley audit query` prints one line per record, whatever the record's text holds.

A record's excerpt is a sender's text (a delegation's objective, an answer's preview): its line
breaks split one record's row into stray lines between the others, and a model's escape
sequences would reach the person's terminal.
"""

from __future__ import annotations

from datetime import UTC, datetime

from schemas import AuditRecord
from tools.audit import _row


def _record(objective: str) -> AuditRecord:
    return AuditRecord(
        id="r",
        created_at=datetime(2026, 11, 29, tzinfo=UTC),
        tenant="default",
        profile="delegation",
        fact="decision",
        trace_id="01a227f8-567e-7000-8000-000000000000",
        requester="planner",
        target="cli",
        status="delivered",
        task="delegation_response",
        objective=objective,
        chain_index=143,
    )


def test_a_multi_line_excerpt_stays_on_its_records_row() -> None:
    row = _row(_record('Planner\'s report on "Fix the date bug":\n[s\tuccess] research\r\n'))
    assert "\n" not in row and "\r" not in row and "\t" not in row
    assert row.endswith('Planner\'s report on "Fix the date bug": [s uccess] research')


def test_an_escape_sequence_in_an_excerpt_is_shown_not_run() -> None:
    row = _row(_record("done \x1b]52;c;cGF5bG9hZA==\x07 \x1b[2Kfaked"))
    assert "\x1b" not in row and "\x07" not in row
    assert "\\u001b]52;c;cGF5bG9hZA==\\u0007" in row
