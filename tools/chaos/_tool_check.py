"""The tool mix's verdicts (`parley chaos --tools N`): each step the gate admitted ended with
one result, and no step's effect was applied twice, while the tool runtime was SIGKILLed.

The tool runtime promises that a step runs at most once (actors/tools/_runs.py): it marks
the step before running it and stores the result before publishing it, and a step a crash
cut short is run again only if it changes nothing; any other ends `failed`, "interrupted".
The mix's steps all change something (an appended line), so the promise is checked from
three sides:

- the gate's decisions (PARLEY_EVENTS): every `tool_request` it admitted, and every
  `tool_result` about one (the first, and any repeat it refused as `DUPLICATE_ENVELOPE`),
  with the outcome and reason the gate copied from it;
- the workspaces: each step appends one line naming its call and capability, so the lines
  count how often each step's effect happened;
- the runtime's log: it logs `step started` with the step's id before each execution, so
  the lines count how often each step ran, whether or not its effect could happen again (a
  command run again may fail to write where its first run did).

A broken promise, each one a violation:

- unanswered: an admitted step with no admitted result: it vanished (a crash ate it);
- conflicting results: a step whose results say different things (it ran again after it
  was answered, or two deliveries ended it differently);
- applied twice: a step whose line is in its workspace more than once;
- run again: a step the runtime started more than once (none of the mix's may be);
- never started: a step answered `succeeded` that the log never says started (the runtime
  answered without running it, or its log is not there: either way "run again" would be
  judged on nothing);
- succeeded without its effect: a step answered `succeeded` whose line is missing;
- ended otherwise: denied, or failed for a reason other than the interruption (the mix's
  steps are all in scope and far inside their timeout: such an end is a fault of its own);
- refused: a tool request the gate refused (not a repeat): the mix's scope is wrong, and
  the run did not test what it claims;
- stray effects: a line naming no admitted step.

Pure: decisions and counted lines in, verdict out, tested on made-up histories.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from schemas import Decision, ErrorCode

__all__ = ("INTERRUPTED", "ToolStep", "ToolsCheck", "check_tools", "tool_steps_from")

INTERRUPTED = "interrupted"
"""What the reason of a step a crash cut short says (actors/tools/_actor.py)."""

Effect = tuple[str, str]
"""(the call a step served, its capability): what a workspace line names."""


@dataclass(frozen=True, slots=True)
class ToolStep:
    """One tool request the gate admitted, and every result decided about it."""

    step_id: str
    call_id: str
    """The call the agent made it for (the person's delegation): its line names it."""
    capability: str
    results: tuple[tuple[str, str], ...] = ()
    """(outcome, reason) of each result the gate admitted or refused as a duplicate (the
    same one again, or a second answer to the step), in stream order."""
    answered: bool = False
    """Whether the gate admitted a result for it (a repeat refused does not answer it)."""

    @property
    def outcome(self) -> str | None:
        """How it ended (`succeeded`, `failed`, `denied`), by its first result; None: never."""
        return self.results[0][0] if self.results else None

    @property
    def interrupted(self) -> bool:
        """It ended `failed` because a crash cut it short."""
        return self.outcome == "failed" and INTERRUPTED in self.results[0][1]


_DUPLICATE = ErrorCode.DUPLICATE_ENVELOPE


def _repeat(decision: Decision) -> bool:
    return decision.code == _DUPLICATE and decision.rule == "duplicate_id"


def tool_steps_from(decisions: Iterable[Decision], agent: str) -> tuple[list[ToolStep], int]:
    """The steps `agent` asked for and the gate admitted, and how many requests it refused
    (repeats aside). `decisions` are in stream order."""
    steps: dict[str, ToolStep] = {}
    refused = 0
    results: list[Decision] = []
    for decision in decisions:
        if decision.envelope_kind == "tool_result":
            results.append(decision)
        elif decision.envelope_kind != "tool_request" or decision.sender != agent:
            continue
        elif decision.allowed and decision.envelope_id not in steps:
            capability = decision.objective.split(" ", 1)[0]  # the tool, then its arguments
            steps[decision.envelope_id] = ToolStep(
                decision.envelope_id, decision.causation_id, capability
            )
        elif not decision.allowed and not _repeat(decision):
            refused += 1
    for decision in results:
        step = steps.get(decision.causation_id)
        if step is None or not (decision.allowed or decision.code == _DUPLICATE):
            continue  # about no admitted step, or refused for what it is, not as a repeat
        steps[step.step_id] = ToolStep(
            step.step_id,
            step.call_id,
            step.capability,
            (*step.results, (decision.outcome, decision.reason)),
            step.answered or decision.allowed,
        )
    return list(steps.values()), refused


@dataclass(frozen=True, slots=True)
class ToolsCheck:
    """The tool mix's verdict: its figures, and each broken promise's steps."""

    steps: int
    outcomes: dict[str, int]
    interrupted: int
    """Steps a crash cut short (ended `failed`, "interrupted")."""
    interrupted_applied: int
    """Of those, the steps whose effect had happened: killed mid-step, after its effect."""
    unanswered: tuple[str, ...] = ()
    conflicting: tuple[str, ...] = ()
    applied_twice: tuple[str, ...] = ()
    run_again: tuple[str, ...] = ()
    never_started: tuple[str, ...] = ()
    missing_effect: tuple[str, ...] = ()
    ended_otherwise: tuple[str, ...] = ()
    refused: int = 0
    stray_effects: tuple[Effect, ...] = ()

    def violations(self) -> list[str]:
        found: list[str] = []
        for steps, what in (
            (self.unanswered, "tool step(s) admitted and never answered"),
            (self.conflicting, "tool step(s) answered with different results"),
            (self.applied_twice, "tool step(s) whose effect was applied more than once"),
            (self.run_again, "tool step(s) that change something started more than once"),
            (self.never_started, "tool step(s) answered succeeded and never logged started"),
            (self.missing_effect, "tool step(s) answered succeeded without their effect"),
            (self.ended_otherwise, "tool step(s) denied or failed other than interrupted"),
            (self.stray_effects, "tool effect(s) of no admitted step"),
        ):
            if steps:
                found.append(f"{len(steps)} {what}")
        if self.refused:
            found.append(f"{self.refused} tool request(s) refused by the gate")
        return found

    def rows(self) -> list[tuple[str, str]]:
        """The checker table's rows for the mix."""
        how = ", ".join(f"{outcome}: {n}" for outcome, n in sorted(self.outcomes.items()))
        return [
            ("tool steps admitted", f"{self.steps}" + (f" ({how})" if how else "")),
            (
                "  cut short (interrupted)",
                f"{self.interrupted} ({self.interrupted_applied} after their effect)",
            ),
            ("  unanswered", str(len(self.unanswered))),
            ("  conflicting results", str(len(self.conflicting))),
            ("  effect applied twice", str(len(self.applied_twice))),
            ("  run more than once", str(len(self.run_again))),
            ("  succeeded, never started", str(len(self.never_started))),
            ("  succeeded, effect missing", str(len(self.missing_effect))),
            ("  ended otherwise", str(len(self.ended_otherwise))),
            ("  stray effects", str(len(self.stray_effects))),
            ("tool requests refused", str(self.refused)),
        ]


def check_tools(
    steps: Iterable[ToolStep],
    effects: Mapping[Effect, int],
    starts: Mapping[str, int] | None = None,
    refused: int = 0,
) -> ToolsCheck:
    """Judge the tool mix: `steps` from the decisions (`tool_steps_from`), `effects` the
    lines counted in the workspaces by (call, capability), `starts` how often the runtime
    logged each step id started, `refused` the requests the gate refused."""
    steps = list(steps)
    outcomes: dict[str, int] = {}
    for step in steps:
        if step.answered and step.outcome is not None:
            outcomes[step.outcome] = outcomes.get(step.outcome, 0) + 1
    known = {(step.call_id, step.capability) for step in steps}

    def ids(steps_: Iterable[ToolStep]) -> tuple[str, ...]:
        return tuple(sorted(step.step_id for step in steps_))

    def applied(step: ToolStep) -> int:
        return effects.get((step.call_id, step.capability), 0)

    def started(step: ToolStep) -> int:
        return (starts or {}).get(step.step_id, 0)

    answered = [step for step in steps if step.answered]
    interrupted = [step for step in answered if step.interrupted]
    return ToolsCheck(
        steps=len(steps),
        outcomes=outcomes,
        interrupted=len(interrupted),
        interrupted_applied=sum(1 for step in interrupted if applied(step) > 0),
        unanswered=ids(step for step in steps if not step.answered),
        conflicting=ids(step for step in steps if len(set(step.results)) > 1),
        applied_twice=ids(step for step in steps if applied(step) > 1),
        run_again=ids(step for step in steps if started(step) > 1),
        never_started=ids(s for s in answered if s.outcome == "succeeded" and not started(s)),
        missing_effect=ids(s for s in answered if s.outcome == "succeeded" and not applied(s)),
        ended_otherwise=ids(s for s in answered if s.outcome != "succeeded" and not s.interrupted),
        refused=refused,
        stray_effects=tuple(sorted(key for key in effects if key not in known)),
    )
