"""`parley storage`'s table keeps its columns in line whatever a stream's name: an agent's
own buckets (`KV_parley_marks_researcher`) ran past the name column and pushed their row's
figures out of line with the header (a newcomer's walk)."""

from __future__ import annotations

from tools.storage import Usage, render_usage


def test_every_row_ends_its_columns_where_the_header_does() -> None:
    usage = [
        Usage(name="PARLEY_SUBMIT", bytes=2048, messages=3, limit=1 << 30),
        Usage(name="KV_parley_marks_researcher_and_more", bytes=10, messages=1, limit=None),
    ]
    header, *rows = render_usage(usage).splitlines()
    assert {len(row) for row in rows} == {len(header)}
