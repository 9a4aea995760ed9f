"""`parley chaos --cluster 3`'s runner with one planned fault: SIGKILL whichever node leads
PARLEY_SUBMIT mid-run. Locked down, under load: nothing lost or applied twice, every session
completed, the audit chain whole, recovery within the ack wait + 5 s + an election, and not
one refusal in any node's log."""

from __future__ import annotations

import io

import pytest

from tools.chaos import ChaosOptions, run_chaos
from tools.chaos._command import ELECTION_S
from tools.chaos._schedule import SUBMIT_LEADER, PlannedFault

ACK_WAIT_S = 2.0


@pytest.mark.chaos
@pytest.mark.timeout(180)
async def test_killing_the_submit_leader_mid_run_loses_nothing() -> None:
    options = ChaosOptions(
        duration_s=10.0,
        sessions=2,
        ack_wait_s=ACK_WAIT_S,
        plan=(PlannedFault(3.0, "kill", SUBMIT_LEADER, 1.0),),
        cluster=3,
    )
    out = io.StringIO()
    code, report = await run_chaos(options, out)
    text = out.getvalue()
    assert "fault: PARLEY_SUBMIT is led by n" in text, text
    assert report.violations() == [], text
    assert code == 0
    assert report.lost == () and report.duplicate_effects == () and report.dedup_escapes == ()
    assert report.incomplete == () and report.failed == {}, text
    assert report.sessions >= 2 and report.completed == report.sessions
    assert report.audit_records and report.audit_records > 0
    assert report.worst_recovery_s is not None
    assert report.worst_recovery_s <= ACK_WAIT_S + 5.0 + ELECTION_S
    assert report.permission_violations is not None, "the run was not locked down"
    assert not any(report.permission_violations.values()), report.permission_violations
