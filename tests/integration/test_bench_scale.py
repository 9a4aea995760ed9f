"""`parley bench --only scale` runs the real `parley audit verify` on a chain it wrote, and
its verdicts can fail.

A small chain (the figures' aims are the bench's to judge on a million records): the row
must report every record verified, the child's own peak RSS, and each figure with its aim
and verdict; and a chain with one record edited must fail both figures, however fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench import main
from tools.bench._scale_audit import audit_verify_scale


def test_the_scale_row_verifies_every_record_in_a_child_and_prints_aims(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = ["--only", "scale", "--scale-audit-records", "2500", "--out", str(out)]
    argv += ["--scale-overhead-rounds", "0"]  # the overhead figures have a test of their own
    argv += ["--scale-agents", "50", "--scale-agents-window-s", "1"]
    assert main([*argv, "--scale-sessions", "4", "--scale-sessions-few", "1"]) == 0
    scale = json.loads(out.read_text())["scale"]
    audit = scale["audit_verify"]
    assert audit["chain_verified"] and audit["records"] == 2500, audit
    # The child's own peak: an interpreter with the command's libraries, never zero.
    assert 20 < audit["peak_rss_mb"] < 1000, audit
    assert audit["records_per_s"] > 0 and audit["verify_cpu_us_per_record"] > 0, audit
    printed = capsys.readouterr().out
    assert "aim >= 20,000" in printed and "aim < 200 MB" in printed, printed
    # The audit's two, the registry's, the four of the decisions' figure and the sessions'.
    assert printed.count("PASS") + printed.count("FAIL") == 8, printed
    sessions = scale["sessions"]  # every thinking session ended at its cap, its memory printed
    assert sessions["all_completed"] and sessions["many"]["completed"] == 4, sessions
    assert "KB resident per session" in printed, printed
    # A session's stores were counted in the streams they went to (three turns, each a call
    # and an answer through the gate: ids claimed, deliveries, decisions) and made again by
    # raw nats-py, whose rate is printed beside the rate the aim asks.
    by_stream = sessions["stores_by_stream"]
    assert by_stream["KV_benchsessions_idempotency"] >= 2 * 3, by_stream
    assert by_stream["BENCHSESSIONS_DELIVER"] >= 2 * 3, by_stream
    assert sessions["stores_per_session"] == sum(by_stream.values()) > 30, sessions
    assert sessions["floor_sessions_per_s"] > 0 and sessions["asked_sessions_per_s"] > 0
    assert sessions["parley_stores_per_s"] > 0, sessions
    assert "made without Parley on a server of their own" in printed, printed


async def test_a_chain_that_does_not_verify_fails_the_row() -> None:
    def edited(index: int, sealed: bytes) -> bytes:
        return sealed.replace(b'"fact":"decision"', b'"fact":"decisioN"') if index == 7 else sealed

    audit = await audit_verify_scale(500, stored_as=edited)
    assert not audit["chain_verified"], audit
    assert audit["pass"] == {"records_per_s": False, "peak_rss_mb": False}, audit
    assert "BROKEN" in audit["verify_output"] or '"ok": false' in audit["verify_output"]
