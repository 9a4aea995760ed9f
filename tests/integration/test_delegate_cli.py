"""`parley delegate` against the delegation demo, as a person runs it (issue 15, items 6 and 7).

One `parley up deploy/topologies/delegation.toml` for the module, locked down (the default),
in a directory of its own that sees the repository's deploy/ folder: the gate, the planner
and the three specialists with their scripted brains, each process its own nkey user. The
demo bundle is published with `parley policy publish`, as docs/delegation.md says. Every
command is a real `parley delegate` process run in that directory, with no NATS_URL: it finds
the system and its credentials under `.parley/`, and the answers come back through the real
gate on the person's deliver subject.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.processes import READY, REPO, SUPPORT_PATH, ProcessOutput, close_up, parley_up
from tools.cli import main
from tools.demo import sign_policy

TOPOLOGY = REPO / "deploy" / "topologies" / "delegation.toml"
SPECIALISTS = ("researcher", "coder", "reviewer")
ACTORS = ("gate", "router", "planner", *SPECIALISTS)
STARTUP_S = 60.0


@dataclass(frozen=True)
class Demo:
    """The directory `parley up` runs in, a person's environment, and `parley up` itself."""

    home: Path
    env: dict[str, str]
    up: ProcessOutput

    def delegate(self, *argv: str) -> tuple[int, list[str]]:
        """Run `parley delegate ARGV` there; its exit code and its output lines."""
        return _parley(self.env, self.home, "delegate", *argv)


def _parley(env: dict[str, str], cwd: Path, *argv: str) -> tuple[int, list[str]]:
    """A `parley` command as a real process, to its end: exit code, stdout then stderr lines."""
    done = subprocess.run(
        [sys.executable, "-m", "tools", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=STARTUP_S,
        check=False,
    )
    return done.returncode, (done.stdout + done.stderr).splitlines()


def _person_env() -> dict[str, str]:
    """A person's shell: no NATS_URL, no namespace, nothing but the tests' support path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "PARLEY_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SUPPORT_PATH, env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    home = tmp_path_factory.mktemp("delegation")
    (home / "deploy").symlink_to(REPO / "deploy")  # profiles and scripts, found as in the repo
    signed, _ = sign_policy(REPO / "deploy/policy/demo.toml", home / "keys")  # gate.toml's key
    bundle = home / "demo.signed.json"
    bundle.write_bytes(signed)
    env = _person_env()
    up = parley_up(TOPOLOGY, env, cwd=home)
    try:
        up.wait_line_sync(r"^\[nats\] embedded nats-server .*locked down", timeout=STARTUP_S)
        for actor in ACTORS:
            up.wait_line_sync(rf"^\[{actor}\] .*{READY}", timeout=STARTUP_S)
        code, lines = _parley(env, home, "policy", "publish", str(bundle))
        assert code == 0, lines
        up.wait_line_sync(r"^\[gate\] .*policy bundle in force", timeout=STARTUP_S)
        yield Demo(home, env, up)
        up.signal(signal.SIGINT)
        up.process.wait(30)
    finally:
        close_up(up)


def _returned(lines: list[str], agent: str, status: str) -> int:
    """The index of seed 004's `<agent> returned: STATUS (…)` line."""
    pattern = re.compile(rf"^{agent} returned: {status} \(.+\)$")
    found = [i for i, line in enumerate(lines) if pattern.match(line)]
    assert len(found) == 1, lines
    return found[0]


def test_the_planner_fans_out_to_three_specialists(demo: Demo) -> None:
    code, lines = demo.delegate("@planner", "Assess the CSV parser")
    assert code == 0, lines
    assert lines[0] == "cli delegating to planner: Assess the CSV parser"
    assert re.fullmatch(r"planner returned: SUCCESS \(\d+ tokens, [\d.]+s\)", lines[1]), lines
    assert lines[2] == '    Planner\'s report on "Assess the CSV parser":'
    report = "\n".join(lines[3:])
    assert report.count("[success]") == 3, report
    for asked in ("Prior art for", "An implementation sketch for", "The risks of"):
        assert f"{asked}: Assess the CSV parser" in report, report
    # Each answer in words, not the JSON its model was shown inside the planner's answer.
    assert '"status"' not in report and '{"' not in report, report
    researcher = '    [success] researcher on "Prior art for: Assess the CSV parser": two mature'
    assert any(line.startswith(researcher) for line in lines), report
    assert "      new facts: csvkit and clevercsv both stream rows and sniff the dialect" in lines


def test_the_planner_chains_the_researcher_into_the_coder(demo: Demo) -> None:
    code, lines = demo.delegate(
        "@planner",
        "Fix the date bug in the CSV parser",
        "--input",
        "Dates like 03/04/21 come out as 1921.",
    )
    assert code == 0, lines
    _returned(lines, "planner", "SUCCESS")
    report = "\n".join(lines)
    # The last round is the coder's alone, and it worked from the researcher's finding:
    # seed 003's handoff_data.intermediate_results, as the coder was given it.
    assert report.count("[success]") == 1, report
    assert "coder on" in report and "Write the fix: Fix the date bug" in report, report
    assert "Worked from: Dates like 03/04/21 come out as 1921." in report, report
    assert "Intermediate results:" in report and "two-digit years are read as 19xx" in report
    # The researcher's finding in words, neither as JSON nor quoted and escaped into a list.
    assert '\\"' not in report and '{"' not in report, report


def test_say_prints_the_calls_between_agents_as_they_happen(demo: Demo) -> None:
    """Seed 004's CLI lines on a person's own timeline: the planner's calls to the
    specialists, which the person neither made nor answers, told by the gate as they
    happen and printed before the planner's answer that gathered them (issue 15, item 5)."""
    code, lines = _parley(demo.env, demo.home, "say", "@planner", "Assess the CSV parser")
    assert code == 0, lines
    answer = next(i for i, line in enumerate(lines) if line.startswith("[planner"))
    assert "Planner's report" in lines[answer], lines
    asked = {
        "researcher": "Prior art for",
        "coder": "An implementation sketch for",
        "reviewer": "The risks of",
    }
    for name, task in asked.items():
        calling = lines.index(f"planner calling {name} with task: {task}: Assess the CSV parser")
        assert calling < _returned(lines, name, "SUCCESS") < answer, lines


def test_an_agent_slower_than_its_deadline_times_out(demo: Demo) -> None:
    code, lines = demo.delegate("@reviewer", "take your time", "--deadline-ms", "1000")
    assert code == 1, lines
    assert lines == [
        "cli delegating to reviewer: take your time",
        "reviewer returned: TIMEOUT (no answer)",
        "    Delegation timeout after 1000ms",
    ]


def test_a_person_fans_out_to_the_specialists_directly(demo: Demo) -> None:
    code, lines = demo.delegate("--fan-out", "@researcher,@coder,@reviewer", "Assess the parser")
    assert code == 0, lines
    assert lines[:3] == [f"cli delegating to {name}: Assess the parser" for name in SPECIALISTS]
    for name in SPECIALISTS:
        index = _returned(lines, name, "SUCCESS")
        assert lines[index + 1].startswith(f'    {name} on "Assess the parser": '), lines
    assert lines[-1] == "fan-out: success (3 of 3 succeeded)"


def test_a_refused_target_in_a_fan_out_is_printed_and_fails_the_command(demo: Demo) -> None:
    code, lines = demo.delegate("--fan-out", "@coder,@gpt", "Assess the parser")
    assert code == 1, lines
    _returned(lines, "coder", "SUCCESS")
    refused = _returned(lines, "gpt", "FAILED")
    assert lines[refused] == "gpt returned: FAILED (refused by the gate)"
    assert lines[refused + 1] == (
        "    TARGET_NOT_ALLOWED: cli may not send to gpt "
        "(allowed: router, planner, researcher, coder, reviewer, tools)"
    )
    assert lines[-1] == "fan-out: partial (1 of 2 succeeded)"


def test_the_gate_s_token_budget_refusal_is_the_reason_given(demo: Demo) -> None:
    code, lines = demo.delegate("@coder", "Write the parser", "--max-tokens", "5000")
    assert code == 1, lines
    assert lines[1:] == [
        "coder returned: FAILED (refused by the gate)",
        "    BUDGET_EXCEEDED: Estimated tokens (5000) exceeds budget (1200). "
        "Simplify task or increase budget.",
    ]


def test_a_fan_out_past_the_limit_gets_seed_003_s_refusal(demo: Demo) -> None:
    code, lines = demo.delegate("--fan-out", "@planner,@researcher,@coder,@reviewer", "Assess it")
    assert code == 1, lines
    refusals = [line for line in lines if "Too many concurrent delegates (4/3)" in line]
    # Whole, not the list's shortened repr: a run that admitted all four (seen twice under
    # two test workers) must say what else failed.
    assert len(refusals) == 1, "\n".join(lines)
    assert lines[-1] == "fan-out: partial (3 of 4 succeeded)"


def test_no_process_met_a_permission_violation(demo: Demo) -> None:
    violations = [line for line in demo.up.lines if "violation" in line.lower()]
    assert not violations, violations


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        ((), "no agent: parley delegate @agent"),
        (("Fix it",), "no agent: parley delegate @agent"),
        (("coder", "Fix it"), "no agent: parley delegate @agent"),
        (("@Coder!", "Fix it"), "agent: invalid agent name 'Coder!'"),
        (("@coder",), "no objective"),
        (("--fan-out", "@a,,@b", "Fix it"), "--fan-out: name agents as @name, got ''"),
        (("--fan-out", "@a,b", "Fix it"), "--fan-out: name agents as @name, got 'b'"),
        (("--fan-out", "@a,@b,@a", "Fix it"), "--fan-out names @a twice"),
        (("--fan-out", "@a", "@b", "Fix it"), "either with --fan-out or as the first word"),
        (("@coder", "Fix it", "--deadline-ms", "-5"), "--deadline-ms must be at least 1, got -5"),
        (("@coder", "Fix it", "--max-tokens", "0"), "--max-tokens must be at least 1, got 0"),
    ],
)
def test_arguments_are_checked_before_anything_is_sent(
    argv: tuple[str, ...], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["delegate", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("parley delegate: "), captured.err
    assert problem in captured.err, captured.err


def test_with_no_system_to_talk_to_it_says_what_to_set(tmp_path: Path) -> None:
    env = {**_person_env(), "NATS_URL": "nats://127.0.0.1:1"}  # nothing listens on port 1
    code, lines = _parley(env, tmp_path, "delegate", "@coder", "Fix it")
    assert code == 3, lines  # NATS cannot be reached (docs/cli.md)
    text = "\n".join(lines)
    assert "parley up" in text and "NATS_URL" in text and "Traceback" not in text, text
