"""The chaos checker's tool mix verdicts on made-up histories, and the mix's own agent.

A person delegates to the toolsmith, which asks the tool runtime for a File.Write and then a
Shell.Exec; each step appends a line naming its call and capability, and the runtime logs
each start. Every promise (one result per admitted step, no effect applied twice, no step run
again, a cut-short step ending `failed`, "interrupted") is broken here on purpose once, and
each must fail the verdict.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections import Counter
from pathlib import Path, PurePosixPath

import msgspec
import pytest

from actors.agent._delegating import Delegator
from actors.agent._profile import load_profile
from actors.agent.brains._scripted import load_script
from actors.tools import admit_request
from schemas import Decision, ErrorCode, decode_bundle, effective_scope, utc_now
from tools.chaos._agents import COMMANDS_LOG, TOOL_AGENT, WRITES_LOG, write_agents
from tools.chaos._checker import Published, check_history, format_report
from tools.chaos._command import CHAOS_POLICY
from tools.chaos._reads import Stored
from tools.chaos._records import history_from
from tools.chaos._tool_check import ToolsCheck, check_tools, tool_steps_from
from tools.chaos._tools import count_effects, count_starts

T0 = utc_now()
ASK = "ask"
"""The person's delegation to the toolsmith."""
(WRITE,) = Delegator.request_ids(ASK, 0, 1)
(COMMAND,) = Delegator.request_ids(ASK, 1, 1)
INTERRUPTED = "TOOL_EXECUTION_FAILED: interrupted: the tool runtime stopped while step x ran"


def _decision(
    envelope_id: str, sender: str, target: str, kind: str, cause: str = "", **verdict: object
) -> Decision:
    return Decision(
        id=str(verdict.pop("decision_id", f"d-{envelope_id}")),
        created_at=T0,
        decided_at=T0,
        allowed=bool(verdict.pop("allowed", True)),
        sender=sender,
        target=target,
        envelope_id=envelope_id,
        envelope_kind=kind,
        causation_id=cause,
        trace_id=ASK,
        **verdict,  # type: ignore[arg-type]  # objective, outcome, reason, code, rule
    )


def _request(step: str, capability: str, **verdict: object) -> Decision:
    objective = f"{capability} {json.dumps({'path': 'x'})}"
    return _decision(step, TOOL_AGENT, "tools", "tool_request", ASK, objective=objective, **verdict)


def _result(step: str, outcome: str = "succeeded", reason: str = "", **verdict: object) -> Decision:
    return _decision(
        str(verdict.pop("result_id", f"result-{step}")),
        "tools",
        TOOL_AGENT,
        "tool_result",
        step,
        outcome=outcome,
        reason=reason,
        **verdict,
    )


def _history(*, command: list[Decision] | None = None) -> list[Decision]:
    """The delegation, its two steps and their results, and the answer to the person."""
    return [
        _decision(ASK, "cli", TOOL_AGENT, "delegation_request"),
        _request(WRITE, "File.Write"),
        _result(WRITE),
        _request(COMMAND, "Shell.Exec"),
        *(command if command is not None else [_result(COMMAND)]),
        _decision("done", TOOL_AGENT, "cli", "delegation_response", ASK),
    ]


EFFECTS = {(ASK, "File.Write"): 1, (ASK, "Shell.Exec"): 1}
STARTS = {WRITE: 1, COMMAND: 1}


def _check(
    decisions: list[Decision],
    effects: dict[tuple[str, str], int] = EFFECTS,
    starts: dict[str, int] = STARTS,
) -> ToolsCheck:
    steps, refused = tool_steps_from(decisions, TOOL_AGENT)
    return check_tools(steps, effects, starts, refused)


def test_steps_answered_once_with_their_effect_once_pass() -> None:
    check = _check(_history())
    assert check.violations() == []
    assert (check.steps, check.outcomes, check.interrupted) == (2, {"succeeded": 2}, 0)


def test_a_step_cut_short_after_its_effect_ends_interrupted_and_passes() -> None:
    check = _check(_history(command=[_result(COMMAND, "failed", INTERRUPTED)]))
    assert check.violations() == []
    assert (check.interrupted, check.interrupted_applied) == (1, 1)
    assert check.outcomes == {"succeeded": 1, "failed": 1}


def test_the_same_result_again_is_no_conflict() -> None:
    repeat = _result(
        COMMAND,
        decision_id="d-repeat",
        allowed=False,
        code=ErrorCode.DUPLICATE_ENVELOPE,
        rule="duplicate_id",
    )
    assert _check(_history(command=[_result(COMMAND), repeat])).violations() == []


@pytest.mark.parametrize(
    ("command", "effects", "starts", "broken"),
    [
        ([], EFFECTS, STARTS, "1 tool step(s) admitted and never answered"),
        (
            [
                _result(COMMAND, "failed", INTERRUPTED),
                _result(
                    COMMAND,
                    result_id="another-result",
                    allowed=False,
                    code=ErrorCode.DUPLICATE_ENVELOPE,
                    rule="duplicate_answer",
                ),
            ],
            EFFECTS,
            STARTS,
            "1 tool step(s) answered with different results",
        ),
        (
            None,
            {**EFFECTS, (ASK, "Shell.Exec"): 2},
            STARTS,
            "1 tool step(s) whose effect was applied more than once",
        ),
        (
            None,
            EFFECTS,
            {**STARTS, COMMAND: 2},
            "1 tool step(s) that change something started more than once",
        ),
        (
            None,
            EFFECTS,
            {WRITE: 1},
            "1 tool step(s) answered succeeded and never logged started",
        ),
        (
            None,
            {(ASK, "File.Write"): 1},
            STARTS,
            "1 tool step(s) answered succeeded without their effect",
        ),
        (
            [_result(COMMAND, "failed", "TOOL_EXECUTION_FAILED: timed out after 60 s")],
            EFFECTS,
            STARTS,
            "1 tool step(s) denied or failed other than interrupted",
        ),
        (
            [_result(COMMAND, "denied", "CAPABILITY_DENIED: outside allowed_paths")],
            EFFECTS,
            STARTS,
            "1 tool step(s) denied or failed other than interrupted",
        ),
        (
            None,
            {**EFFECTS, ("someone-else", "Shell.Exec"): 1},
            STARTS,
            "1 tool effect(s) of no admitted step",
        ),
    ],
    ids=[
        "unanswered",
        "conflicting",
        "applied-twice",
        "run-again",
        "never-started",
        "effect-missing",
        "failed-otherwise",
        "denied",
        "stray-effect",
    ],
)
def test_each_broken_promise_fails_the_verdict(
    command: list[Decision] | None,
    effects: dict[tuple[str, str], int],
    starts: dict[str, int],
    broken: str,
) -> None:
    assert _check(_history(command=command), effects, starts).violations() == [broken]


def test_a_request_the_gate_refused_fails_but_a_repeat_does_not() -> None:
    refused = _request("refused", "Shell.Exec", allowed=False, code=ErrorCode.CAPABILITY_DENIED)
    repeat = _request(
        WRITE, "File.Write", allowed=False, code=ErrorCode.DUPLICATE_ENVELOPE, rule="duplicate_id"
    )
    assert _check([*_history(), repeat]).violations() == []
    assert _check([*_history(), refused]).violations() == ["1 tool request(s) refused by the gate"]


def test_the_tool_verdict_fails_the_run_and_an_agents_steps_are_no_duplicate_effects() -> None:
    """Through the whole checker: the toolsmith's two tool requests for one call are two
    places, not one effect twice, and a broken tool promise fails the run's verdict."""
    decisions = _history()
    records = [Stored(seq, "parley.decisions.x", d) for seq, d in enumerate(decisions, 1)]
    history = history_from(
        records, [Published(ASK, 1, "gate", "delegation_request")], answering=(TOOL_AGENT,)
    )
    tools = _check(decisions, starts={**STARTS, WRITE: 2})
    report = check_history(
        history.published, history.applied, stored_ids=history.stored_ids, tools=tools
    )
    assert report.lost == () and report.duplicate_effects == ()
    assert report.violations() == ["1 tool step(s) that change something started more than once"]
    table = format_report(report)
    assert re.search(r"^  run more than once +1$", table, re.MULTILINE), table
    assert re.search(r"^verdict +FAIL: ", table, re.MULTILINE), table


def test_effects_and_starts_are_counted_from_the_workspaces_and_the_log(tmp_path: Path) -> None:
    workspaces = tmp_path / "workspaces"
    (workspaces / ASK).mkdir(parents=True)
    (workspaces / ASK / WRITES_LOG).write_text(f"{ASK} File.Write\n")
    (workspaces / ASK / COMMANDS_LOG).write_text(f"{ASK} Shell.Exec\n{ASK} Shell.Exec\nodd\n")
    assert count_effects(workspaces) == Counter(
        {(ASK, "File.Write"): 1, (ASK, "Shell.Exec"): 2, ("odd", ""): 1}
    )
    log = tmp_path / "tools.log"
    started = {"msg": "step started", "step_id": COMMAND}
    log.write_text(
        "\n".join([json.dumps(started), "Traceback: step started", json.dumps(started), ""])
    )
    assert count_starts(log) == Counter({COMMAND: 2})
    assert count_starts(tmp_path / "missing.log") == Counter()


def test_the_bundle_admits_every_step_of_the_toolsmiths_script(tmp_path: Path) -> None:
    """The run's bundle and the toolsmith's script agree: a scope too narrow for the mix
    would end its steps denied, and the run would test nothing."""
    folder = write_agents(tmp_path / "agents", (TOOL_AGENT,), delegating=False)
    profile = load_profile(TOOL_AGENT, folder)
    assert set(profile.tools) == {"File.Write", "Shell.Exec"}
    bundle = decode_bundle(msgspec.json.encode(tomllib.loads(CHAOS_POLICY.read_text())))
    script = load_script(folder / "scripts" / f"{TOOL_AGENT}.toml")
    calls = [call for turn in script.turn for call in turn.calls]
    assert [call.to for call in calls] == ["File.Write", "Shell.Exec"]
    for call in calls:
        scope = effective_scope(bundle, TOOL_AGENT, call.to)
        assert scope is not None, call.to
        arguments = {
            key: value.format_map({"task": ASK}) if isinstance(value, str) else value
            for key, value in call.arguments.items()
        }
        admit_request(call.to, arguments, scope, PurePosixPath("/workspace"), resolve=False)
