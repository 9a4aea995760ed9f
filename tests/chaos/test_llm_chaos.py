"""The LLM mix under crashes: the LLM gateway SIGKILLed while it streams the agents' answers.

`parley chaos`'s runner with a collaboration session and LLM workers side by side: the person
delegates to the narrator, whose gateway brain streams each answer through the LLM gateway
from the run's slow local provider (1.5 s a stream, so a kill most likely lands mid-stream).
The gateway is SIGKILLed twice; each time it comes back, the requests it was streaming are
delivered again, find no stored answer (a stream cut short stored nothing) and are streamed
again from the provider, and each is answered once.

Pass figures, from the gate's decisions and the provider's log: every model call the gate
admitted answered exactly once, none twice, no failure untyped; at least one stream cut by a
kill (the kill did land mid-stream); and the run's own promises (nothing lost, every
delegation answered, the audit chain whole, no refusal in the server's log).
"""

from __future__ import annotations

import io

import pytest

from tools.chaos import ChaosOptions, run_chaos
from tools.chaos._schedule import PlannedFault
from tools.chaos._topology import GATEWAY

pytestmark = pytest.mark.chaos


async def test_killing_the_gateway_mid_stream_answers_every_model_call_once() -> None:
    options = ChaosOptions(
        duration_s=10.0,
        sessions=1,
        llm=2,
        plan=(PlannedFault(3.0, "kill", GATEWAY, 0.5), PlannedFault(6.5, "kill", GATEWAY, 0.5)),
    )
    out = io.StringIO()
    code, report = await run_chaos(options, out)
    assert report.violations() == [], out.getvalue()
    assert code == 0
    llm = report.llm
    assert llm is not None, out.getvalue()
    assert llm.outcomes.get("success", 0) >= 3, out.getvalue()
    assert llm.streams.get("cut", 0) >= 1, out.getvalue()  # a kill landed mid-stream
    assert sum(llm.outcomes.values()) == llm.calls
    assert report.unanswered == () and report.delegations >= 3, out.getvalue()
    assert report.audit_records and not report.audit_gaps, out.getvalue()
    assert report.permission_violations is not None, "the run was not locked down"
    assert not any(report.permission_violations.values()), report.permission_violations
