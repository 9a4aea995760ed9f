"""A chaos run whose load stops fails (issue 30).

`parley chaos` under a policy that lets the person open only three sessions a minute: the
load generator's first sessions start, every request after them is refused RATE_LIMITED, and
the fault then hits an idle system. The load generator reads the refusals from the person's
deliveries (each one ends its wait at once), the table shows them by code, and the verdict
fails because no session started after the fault, although every session that ran passed.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from tools.chaos import ChaosOptions, run_chaos
from tools.chaos._command import CHAOS_POLICY
from tools.chaos._schedule import PlannedFault

pytestmark = pytest.mark.chaos


def _policy_with_person_rate(folder: Path, rate: int) -> Path:
    """The chaos bundle with the person's (`cli`'s) rate set to `rate` a minute."""
    text = CHAOS_POLICY.read_text()
    head, cli, rest = text.partition("[profiles.cli]")
    section, tail, after = rest.partition("\n[profiles.gpt]")
    section, count = re.subn(r"(?m)^rate_per_minute = \d+", f"rate_per_minute = {rate}", section)
    assert count == 1, "the chaos bundle's person profile has one rate"
    path = folder / "slow-person.toml"
    path.write_text(head + cli + section + tail + after)
    return path


async def test_a_run_whose_sessions_are_refused_after_the_first_few_fails(tmp_path: Path) -> None:
    options = ChaosOptions(
        duration_s=8.0,
        sessions=2,
        policy=_policy_with_person_rate(tmp_path, 3),
        plan=(PlannedFault(3.0, "kill", "claude", 0.5),),
    )
    out = io.StringIO()
    code, report = await run_chaos(options, out)
    text = out.getvalue()
    assert code == 1, text
    assert report.sessions == 3 and report.completed == 3, text  # the rate's burst, all passed
    assert report.lost == () and report.incomplete == () and report.duplicate_effects == ()
    assert report.load is not None and report.load.refusals.get("RATE_LIMITED", 0) > 0, text
    assert re.search(
        r"^refused \(error answers to the load\) +\d+ \(RATE_LIMITED: \d+\)$", text, re.M
    )
    assert re.search(r"^fault windows with sessions at work +0 of 1$", text, re.M), text
    (stopped,) = report.load.violations()
    assert stopped in report.violations(), text  # beside "recovery took inf s": no progress
    assert "the load stopped" in text.splitlines()[-1], text
