"""`parley up` with no argument, in a directory that is not the checkout, runs the real system.

A newcomer's `parley up` used to start two echo actors and the console, and outside the
checkout it could not find its topology at all. Now it starts the gate, the router, the
auditor, every shipped agent (scripted) and the console, locked down, with the demo
policy signed by a key of the system's own and published, so the README's next command works
as it is: a collaboration reaches `final`, the audit history verifies with the local key, and
`parley audit query` finds the session without being told a tenant. A restart keeps the policy that
is stored (a person's own bundle survives), publishing nothing.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.processes import REPO, close_up, parley_env, parley_up
from tests.support.system import finished, parley_cli

pytestmark = pytest.mark.chaos

AGENTS = ("gpt", "claude", "local", "planner", "researcher", "coder", "reviewer")
ACTORS = ("gate", "router", "auditor", *AGENTS, "tools", "llm", "console")
GOAL = "Collaborate to outline and refine a 5-step plan for a weekend hiking trip."


def _env() -> dict[str, str]:
    env = parley_env("unused", "parley")
    del env["NATS_URL"], env["PARLEY_NAMESPACE"]  # as a person's shell: nothing set
    return env


async def test_parley_up_with_no_argument_runs_the_system_the_readme_talks_to(
    tmp_path: Path,
) -> None:
    env = _env()
    up = parley_up(None, env, cwd=tmp_path)
    try:
        await up.wait_line(
            r"^\[nats\] published deploy/policy/demo.toml as policy version 1", timeout=60
        )
        await up.wait_line(rf"^\[nats\] ready: {', '.join(ACTORS)};", timeout=90)
        code, said = await finished(parley_cli(env, "collab", GOAL, cwd=tmp_path), 90)
        assert code == 0, said
        assert said[-1].startswith("stopped: final"), said
        session = said[0].split()[1].rstrip(":")
        query = parley_cli(env, "audit", "query", "--session", session, cwd=tmp_path)
        code, records = await finished(query, 60)
        assert code == 0 and "session_completed" in "\n".join(records), records
        code, verified = await finished(parley_cli(env, "audit", "verify", cwd=tmp_path), 60)
        assert code == 0, verified
        up.signal(signal.SIGINT)
        assert await up.wait_exit(timeout=30) == 0
    finally:
        close_up(up)
    again = parley_up(None, env, cwd=tmp_path)
    try:
        await again.wait_line(r"^\[nats\] ready: ", timeout=90)
        assert not [line for line in again.lines if "published" in line]
        code, said = await finished(parley_cli(env, "say", "@gpt", "hello", cwd=tmp_path), 60)
        assert code == 0, said
        again.signal(signal.SIGINT)
        assert await again.wait_exit(timeout=30) == 0
    finally:
        close_up(again)


async def test_an_open_broker_system_publishes_its_policy_and_talks(tmp_path: Path) -> None:
    """`parley up --open-broker` (docs/commands.md) published the bundle before anything had
    made the policy's bucket, and exited 2 telling the person to run `parley up`."""
    env = _env()
    up = parley_up(REPO / "examples" / "collaborate", env, "--open-broker", cwd=tmp_path)
    try:
        await up.wait_line(r"^\[nats\] published .* as policy version 1", timeout=60)
        await up.wait_line(r"^\[nats\] ready: ", timeout=90)
        code, said = await finished(parley_cli(env, "collab", GOAL, cwd=tmp_path), 90)
        assert code == 0 and said[-1].startswith("stopped: final"), said
        up.signal(signal.SIGINT)
        assert await up.wait_exit(timeout=30) == 0
    finally:
        close_up(up)
