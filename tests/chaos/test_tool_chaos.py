"""The tool mix under crashes: the tool runtime SIGKILLed while it runs the agents' steps.

`parley chaos`'s runner with a collaboration session and tool workers side by side: the
person delegates to the toolsmith, which has the tool runtime append a line with File.Write,
then run perl to append another and linger (so a kill most likely lands mid-command, after
the command's effect). The runtime is SIGKILLed twice while commands run; each time it comes
back, the steps it was running are delivered again, find their mark without a result, and
end `failed`, "interrupted", without running again.

Pass figures, from the gate's decisions and the lines in the workspaces: every step the gate
admitted answered once, none applied twice, none succeeded without its line, none ended
otherwise; at least one step cut short after its effect (the kill did land mid-command); and
the run's own promises (nothing lost, every delegation answered, the audit chain whole, no
refusal in the server's log).
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tools.chaos import ChaosOptions, run_chaos
from tools.chaos._agents import PERL
from tools.chaos._schedule import PlannedFault

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.skipif(not Path(PERL).is_file(), reason=f"the mix's command needs {PERL}"),
]


async def test_killing_the_tool_runtime_mid_command_applies_no_step_twice() -> None:
    options = ChaosOptions(
        duration_s=10.0,
        sessions=1,
        tools=3,
        plan=(PlannedFault(3.0, "kill", "tools", 0.5), PlannedFault(7.0, "kill", "tools", 0.5)),
    )
    out = io.StringIO()
    code, report = await run_chaos(options, out)
    assert report.violations() == [], out.getvalue()
    assert code == 0
    tools = report.tools
    assert tools is not None, out.getvalue()
    assert tools.outcomes.get("succeeded", 0) >= 3, out.getvalue()
    assert tools.interrupted >= 1 and tools.interrupted_applied >= 1, out.getvalue()
    assert sum(tools.outcomes.values()) == tools.steps
    assert report.unanswered == () and report.delegations >= 3, out.getvalue()
    assert report.permission_violations is not None, "the run was not locked down"
    assert not any(report.permission_violations.values()), report.permission_violations
