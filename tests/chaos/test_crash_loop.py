"""A crash-looping agent: its supervisor gives up, and the router answers `AGENT_UNAVAILABLE`.

The gate, the router and `claude` run as usual; `gpt` runs under a `parley up` of its own (as
an agent on another machine would), with an intensity of 2. The test SIGKILLs each `gpt` the
supervisor starts, as soon as it is ready, until the supervisor gives up and exits. A session
that then asks `gpt` to speak fails within the heartbeat limit (three beats of 0.5 s) with
`AGENT_UNAVAILABLE` naming `gpt`, and `parley collab` says so and exits 1, instead of waiting
for ever on a call that sits in a dead agent's queue.

A second test keeps the agent alive but has it never answer (a brain that hangs): its
heartbeat is fresh, so only the router's turn timeout ends the session.

Both run under the least-privilege config: every process, `parley up`'s child and the CLI
included, is its own nkey user, and none may hit a permission violation.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import pytest

from tests.support.agents import write_profile
from tests.support.lockdown import LockedDown
from tests.support.processes import ProcessOutput, close_up, parley_up
from tests.support.system import System, finished, parley_cli, running_locked_system

pytestmark = pytest.mark.chaos

GOAL = "Collaborate on a two-line poem about tides."
INTENSITY = 2


def collab(system: System, locked: LockedDown) -> ProcessOutput:
    config = ("--config", str(locked.settings_file("cli")))
    return parley_cli(system.env, "collab", *config, "--first", "gpt", "--max-rounds", "4", GOAL)


def assert_no_violations(*processes: ProcessOutput) -> None:
    for process in processes:
        refused = [line for line in process.lines if "permission" in line.lower()]
        assert not refused, f"{process.name}: {refused}"


async def test_a_crash_looping_agent_is_given_up_on_and_its_session_fails_as_unavailable(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    locked = locked_down
    async with running_locked_system(
        locked, tmp_path / "keys", agents={"claude": "claude"}, heartbeat_s="0.5"
    ) as system:
        topology = tmp_path / "gpt-alone.toml"
        topology.write_text(
            f"intensity = {INTENSITY}\nperiod_s = 120.0\n\n[[actor]]\n"
            f'name = "gpt"\nrun = "agent"\nconfig = "{locked.settings_file("gpt")}"\n'
        )
        up = parley_up(topology, system.env, cwd=tmp_path)
        try:
            kills, seen = 0, 0
            while True:
                index, line = await up.wait_line(
                    r"^\[gpt\] (started \(pid \d+\)|.*giving up)", start=seen
                )
                seen = index + 1
                if "giving up" in line:
                    break
                match = re.search(r"pid (\d+)", line)
                assert match is not None
                ready, _ = await up.wait_line(r'^\[gpt\] .*"msg":"ready"', start=seen)
                seen = ready + 1
                os.kill(int(match.group(1)), signal.SIGKILL)
                kills += 1
            assert await up.wait_exit(30) == 1
            assert kills == INTENSITY + 1  # the restart past the intensity is never made
            assert any("parley up: giving up" in line for line in up.lines)
        finally:
            close_up(up)

        cli = collab(system, locked)
        code, lines = await finished(cli, 30)
        said = "\n".join(lines)
        assert code == 1, said
        assert "stopped: error (round 1)" in lines, said
        failure = next(line for line in lines if line.strip().startswith("error:"))
        assert re.fullmatch(
            r"\s*error: AGENT_UNAVAILABLE: gpt is not running: last heartbeat [\d.]+ s ago "
            r"\(limit 1\.5 s\); start it and try again",
            failure,
        ), failure
        router = "\n".join(system.processes["router"].lines)
        assert '"msg":"agent unavailable"' in router
        assert_no_violations(cli, up, *system.processes.values())


async def test_an_agent_that_beats_but_never_answers_times_out(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    hanging = write_profile(
        tmp_path / "agents",
        "gpt",
        # A local agent program that reads its requests and never answers (exits at EOF).
        f'backend = "subprocess"\ncommand = ["{sys.executable}", "-c", "import sys; '
        f'sys.stdin.read()"]\nturn_timeout_s = 3600',
    )
    async with running_locked_system(
        locked_down,
        tmp_path / "keys",
        agents={"gpt": str(hanging), "claude": "claude"},
        heartbeat_s="0.5",
        # Six missed beats (3 s), not three: one beat delayed by a loaded machine must not
        # make the beating agent look gone before its turn times out.
        router_options={"turn_timeout_s": 2.0, "missed_beats": 6},
    ) as system:
        cli = collab(system, locked_down)
        code, lines = await finished(cli, 30)
        said = "\n".join(lines)
        assert code == 1, said
        assert "    error: AGENT_UNAVAILABLE: gpt did not answer within 2 s (turn timeout 2 s)" in (
            lines
        ), said
        assert_no_violations(cli, *system.processes.values())
