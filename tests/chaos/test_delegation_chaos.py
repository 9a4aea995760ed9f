"""The delegation mix under a crash: the delegating agent killed while it waits on its calls.

`parley chaos`'s runner with collaboration sessions and delegation workers side by side: the
person delegates to gpt, which fans out to claude and the reviewer, chains one more call to
claude and answers from the results. Halfway through, gpt is SIGKILLed with requests out and
answers coming back; it must resume every call from its stored wait. Pass figures, from the
checker over what JetStream stored: lost 0, duplicate effects 0 (a fan-out and a chain's
rounds are different effects; a request sent again is the same one), nothing stored twice,
every session completed and every delegation answered within its bound, no refusal in the
server's log.
"""

from __future__ import annotations

import io

import pytest

from tools.chaos import ChaosOptions, run_chaos
from tools.chaos._schedule import PlannedFault

pytestmark = pytest.mark.chaos

ACK_WAIT_S = 2.0


async def test_killing_the_delegating_agent_loses_no_delegation() -> None:
    options = ChaosOptions(
        duration_s=8.0,
        sessions=2,
        delegations=2,
        ack_wait_s=ACK_WAIT_S,
        plan=(PlannedFault(3.0, "kill", "gpt", 1.0),),
    )
    out = io.StringIO()
    code, report = await run_chaos(options, out)
    assert report.violations() == [], out.getvalue()
    assert code == 0
    assert report.lost == () and report.duplicate_effects == () and report.dedup_escapes == ()
    assert report.delegations >= 2, out.getvalue()
    assert report.unanswered == () and report.late_answers == ()
    # Answered by gpt itself, each time: a crash must not turn into an error for the person.
    assert report.answered_by == {"delegation_response": report.delegations}, out.getvalue()
    assert report.incomplete == () and report.completed == report.sessions
    assert report.faults and report.worst_recovery_s is not None
    assert report.worst_recovery_s <= ACK_WAIT_S + 5.0
    assert report.permission_violations is not None, "the run was not locked down"
    assert not any(report.permission_violations.values()), report.permission_violations
