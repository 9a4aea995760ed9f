"""Named chaos scenarios: the demo topology under load, one fault each, and the checker's verdict.

Each runs `parley chaos`'s runner with an explicit fault instead of a seeded schedule: real
actor processes (gate, router, auditor, two scripted agents) on a nats-server of the run's
own running the least-privilege config (one nkey user per actor, each actor with its own
settings file), concurrent collaboration sessions, a real SIGKILL (or the server killed and
restarted on its port, store and config). Pass figures, from the checker over what JetStream
stored: lost 0, duplicate effects 0, nothing stored twice, every session completed, the audit
chain verifies, the next end-to-end message within ack wait + 5 s of the fault being healed,
and not one refusal in the server's log: every grant the work needs, and no actor straying.
"""

from __future__ import annotations

import io

import pytest

from tools.chaos import EVERY_ACTOR, ChaosOptions, run_chaos
from tools.chaos._schedule import SERVER, PlannedFault

pytestmark = pytest.mark.chaos

ACK_WAIT_S = 2.0


@pytest.mark.parametrize(
    "target",
    ["gate", "router", "gpt", "auditor", EVERY_ACTOR, SERVER],
    ids=["gate", "router", "agent", "auditor", "every-actor", "nats-server"],
)
async def test_a_kill_mid_run_loses_nothing(target: str) -> None:
    options = ChaosOptions(
        duration_s=8.0,
        sessions=2,
        ack_wait_s=ACK_WAIT_S,
        plan=(PlannedFault(3.0, "kill", target, 1.0),),
    )
    out = io.StringIO()
    code, report = await run_chaos(options, out)
    assert report.violations() == [], out.getvalue()
    assert code == 0
    assert report.lost == () and report.duplicate_effects == () and report.dedup_escapes == ()
    assert report.incomplete == ()
    assert report.audit_records and report.audit_records > 0
    assert report.faults and report.worst_recovery_s is not None
    assert report.worst_recovery_s <= ACK_WAIT_S + 5.0
    assert report.sessions >= 2
    assert report.failed == {}, out.getvalue()
    assert report.completed == report.sessions
    assert report.permission_violations is not None, "the run was not locked down"
    assert not any(report.permission_violations.values()), report.permission_violations


async def test_the_load_goes_on_until_a_fault_outlasting_it_has_healed() -> None:
    """The auditor (no session waits on it) paused from 2 s into a 5 s load until 8 s:
    sessions go on completing while it is stopped, so a load that ended on time would have
    finished its last session before the heal, and the recovery would read as never."""
    options = ChaosOptions(
        duration_s=5.0,
        sessions=2,
        ack_wait_s=ACK_WAIT_S,
        plan=(PlannedFault(2.0, "pause", "auditor", 6.0),),
    )
    out = io.StringIO()
    code, report = await run_chaos(options, out)
    assert report.violations() == [], out.getvalue()
    assert code == 0
    assert report.recovery_s and report.recovery_s[0] is not None, out.getvalue()
    assert report.recovery_s[0] <= ACK_WAIT_S + 5.0
    assert report.completed == report.sessions and report.lost == ()
