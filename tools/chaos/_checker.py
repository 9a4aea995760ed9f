"""The chaos checker: from what a run durably stored, the promises it kept or broke.

Jepsen-style, the checker only looks at histories after the run. A history is four lists of
facts: what JetStream acknowledged to a publisher (`Published`), what a handler did with a
delivery (`Applied`), each session's end (`SessionOutcome`) and each fault the scheduler
injected (`Fault`). The facts are read from the streams themselves (tools/chaos/_records.py),
so no actor carries test hooks, and this module needs no bus: it is a pure function of the
history, tested on hand-made histories.

What it computes, and why each is a broken promise:

- lost: a message JetStream acknowledged that its receiver never applied (no effect caused by
  it, no session transition naming it). Acknowledged means stored; stored must mean handled.
- duplicate effects: one handler answered one input twice under different ids for the same
  purpose (two replies to one call, two `step_completed` for one response; a fan-out's
  requests have one purpose each). Redeliveries must re-publish the same derived id, which
  JetStream then drops.
- de-duplication escapes: one id stored twice (the gate decided twice on one envelope, one
  session event appended twice): a redelivery's copy that JetStream should have dropped.
- sessions not completed: a session that started and never reached `session_completed` or
  `session_failed`; a failure must carry its reason, so a reasonless one counts too.
- delegations unanswered: a person's delegation to an agent that no answer (a
  `delegation_response`, or an `error` about it) reached the person for, or one past the
  delegation's bound. A person waiting on an agent is owed an answer as a session is an end.
- audit gaps: what the audit chain verifier found missing or broken.
- recovery: for each fault, the time from the fault to the next end-to-end message.
- permission violations: what the broker refused, by actor. Under the least-privilege config a
  refused publish or subscription is either a grant too narrow for the actor's work or an
  actor doing what it must not; either way the run did not show what it claims to.
- the load held: a session started in every fault window, and the refusals the load got back
  (tools/chaos/_verdicts.py). A run whose load stopped proves nothing about later faults.
- the tool mix (`--tools N`): every tool step ended with one result and none was applied
  twice (tools/chaos/_tool_check.py).
- the LLM mix (`--llm N`): every model call ended with exactly one answer, a success or a
  typed failure (tools/chaos/_llm_check.py).

The facts themselves are plain records (tools/chaos/_facts.py).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tools.chaos._facts import Applied, DelegationOutcome, Fault, Published, SessionOutcome
from tools.chaos._llm_check import LlmCheck
from tools.chaos._tool_check import ToolsCheck
from tools.chaos._verdicts import LoadCheck, check_load, recoveries, verdict_table

__all__ = (
    "Applied",
    "ChaosReport",
    "DelegationOutcome",
    "Fault",
    "Published",
    "SessionOutcome",
    "check_history",
    "format_report",
)


@dataclass(frozen=True, slots=True)
class ChaosReport:
    """The checker's verdict; `violations()` names every broken promise."""

    published: int
    applied: int
    lost: tuple[str, ...]
    duplicate_effects: tuple[tuple[str, str, str], ...]
    dedup_escapes: tuple[str, ...]
    sessions: int
    completed: int
    failed: dict[str, int]
    incomplete: tuple[str, ...]
    audit_records: int | None
    audit_gaps: tuple[str, ...]
    recovery_s: tuple[float | None, ...]
    late: tuple[str, ...] = ()
    """Sessions that ended after the bound their last step stated (`ends_by`), or never."""
    completed_by: dict[str, int] = field(default_factory=dict)
    """Completed sessions by stop reason (`final`, `cap_reached`, ...)."""
    longest_session_s: float | None = None
    recovery_bound_s: float | None = None
    faults: tuple[Fault, ...] = field(default=())
    permission_violations: dict[str, int] | None = None
    """Refusals the broker reported, by actor; None when the broker ran open (no users)."""
    delegations: int = 0
    """Delegations people made (0: the run had no delegation mix)."""
    answered_by: dict[str, int] = field(default_factory=dict)
    """Answered delegations by how (`delegation_response`, `error`, `refused`)."""
    unanswered: tuple[str, ...] = ()
    late_answers: tuple[str, ...] = ()
    """Delegations answered past their bound."""
    repeats_refused: int = 0
    """Submissions under an id already decided that the gate refused (`DUPLICATE_ENVELOPE`):
    a repeat JetStream's window let through, caught by the gate's own record of ids."""
    load: LoadCheck | None = None
    """Whether sessions started in every fault window; None when the run's span is unknown."""
    tools: ToolsCheck | None = None
    """The tool mix's verdict (tools/chaos/_tool_check.py); None when the run had none."""
    llm: LlmCheck | None = None
    """The LLM mix's verdict (tools/chaos/_llm_check.py); None when the run had none."""

    @property
    def worst_recovery_s(self) -> float | None:
        """The longest recovery; None when no fault was injected."""
        if not self.recovery_s:
            return None
        if any(value is None for value in self.recovery_s):
            return float("inf")
        return max(value for value in self.recovery_s if value is not None)

    def violations(self) -> list[str]:
        """Each broken promise as a sentence; empty when the run kept them all."""
        found: list[str] = []
        if self.lost:
            found.append(f"{len(self.lost)} acknowledged message(s) never applied")
        if self.duplicate_effects:
            found.append(f"{len(self.duplicate_effects)} input(s) with duplicate effects")
        if self.dedup_escapes:
            found.append(f"{len(self.dedup_escapes)} id(s) stored more than once")
        if self.incomplete:
            found.append(f"{len(self.incomplete)} session(s) neither completed nor failed")
        if self.late:
            found.append(f"{len(self.late)} session(s) ended past their stated bound")
        if self.unanswered:
            found.append(f"{len(self.unanswered)} delegation(s) never answered")
        if self.late_answers:
            found.append(f"{len(self.late_answers)} delegation(s) answered past their bound")
        if self.failed.get("", 0):
            found.append(f"{self.failed['']} session(s) failed without a reason")
        if self.audit_gaps:
            found.append(f"audit chain broken: {len(self.audit_gaps)} problem(s)")
        worst = self.worst_recovery_s
        if (
            worst is not None
            and self.recovery_bound_s is not None
            and worst > self.recovery_bound_s
        ):
            found.append(f"recovery took {worst:.1f} s (bound {self.recovery_bound_s:.1f} s)")
        if refused := sum((self.permission_violations or {}).values()):
            found.append(f"{refused} permission violation(s): {_by_actor(self)}")
        if self.load is not None:
            found += self.load.violations()
        if self.tools is not None:
            found += self.tools.violations()
        if self.llm is not None:
            found += self.llm.violations()
        return found


def _by_actor(report: ChaosReport) -> str:
    counts = report.permission_violations or {}
    return ", ".join(f"{actor}: {n}" for actor, n in sorted(counts.items()) if n)


def check_history(
    published: Iterable[Published],
    applied: Iterable[Applied],
    sessions: Iterable[SessionOutcome] = (),
    *,
    stored_ids: Iterable[str] = (),
    faults: Sequence[Fault] = (),
    end_to_end: Iterable[float] = (),
    audit_records: int | None = None,
    audit_gaps: Iterable[str] = (),
    recovery_bound_s: float | None = None,
    permission_violations: Mapping[str, int] | None = None,
    delegations: Iterable[DelegationOutcome] = (),
    repeats_refused: int = 0,
    load_span: tuple[float, float] | None = None,
    refusals: Mapping[str, int] | None = None,
    tools: ToolsCheck | None = None,
    llm: LlmCheck | None = None,
) -> ChaosReport:
    """Judge one run's history.

    Args:
        published: every acknowledged message whose receiver owes an effect.
        applied: every effect a handler produced, with the input it answers.
        sessions: every session that started.
        stored_ids: the id of every record in the streams that de-duplicate by id; an id seen
            twice escaped de-duplication.
        faults: the injected faults, on the same clock as `end_to_end`.
        end_to_end: when each end-to-end message (a session transition) happened.
        audit_records: how many audit records the verifier read (None: no auditor ran).
        audit_gaps: the verifier's problems.
        recovery_bound_s: the longest acceptable recovery, if any.
        permission_violations: the broker's refusals by actor (None: it ran open).
        delegations: every delegation a person made.
        repeats_refused: submissions under a decided id the gate refused as repeats.
        load_span: when the load started and stopped opening sessions (Unix seconds): each
            fault window in it must see a session start.
        refusals: the error answers the load generator got back, by code.
        tools: the tool mix's verdict, judged apart (`check_tools`).
        llm: the LLM mix's verdict, judged apart (`check_llm`).
    """
    published = list(published)
    applied = list(applied)
    handled = {(record.handler, record.envelope_id) for record in applied}
    lost = tuple(
        sorted({p.envelope_id for p in published if (p.receiver, p.envelope_id) not in handled})
    )
    effects: defaultdict[tuple[str, str, str], set[str]] = defaultdict(set)
    for record in applied:
        effects[(record.handler, record.envelope_id, record.purpose)].add(record.effect_id)
    duplicates = tuple(sorted(key for key, ids in effects.items() if len(ids) > 1))
    counts = Counter(stored_ids)
    escapes = tuple(sorted(key for key, count in counts.items() if count > 1))
    outcomes = list(sessions)
    failed: Counter[str] = Counter()
    completed_by: Counter[str] = Counter()
    completed = 0
    incomplete: list[str] = []
    for outcome in outcomes:
        if outcome.ended == "completed":
            completed += 1
            completed_by[outcome.reason or ""] += 1
        elif outcome.ended == "failed":
            failed[outcome.reason or ""] += 1
        else:
            incomplete.append(outcome.session_id)
    asked = list(delegations)
    answered_by = Counter(d.answer for d in asked if d.answer is not None)
    return ChaosReport(
        published=len(published),
        applied=len(handled),
        lost=lost,
        duplicate_effects=duplicates,
        dedup_escapes=escapes,
        sessions=len(outcomes),
        completed=completed,
        failed=dict(failed),
        incomplete=tuple(sorted(incomplete)),
        late=tuple(sorted(o.session_id for o in outcomes if o.late)),
        completed_by=dict(completed_by),
        longest_session_s=max((t for o in outcomes if (t := o.took_s) is not None), default=None),
        audit_records=audit_records,
        audit_gaps=tuple(audit_gaps),
        recovery_s=recoveries(faults, end_to_end),
        recovery_bound_s=recovery_bound_s,
        faults=tuple(faults),
        permission_violations=(
            None if permission_violations is None else dict(permission_violations)
        ),
        delegations=len(asked),
        answered_by=dict(answered_by),
        unanswered=tuple(sorted(d.request_id for d in asked if d.answer is None)),
        late_answers=tuple(sorted(d.request_id for d in asked if d.late)),
        repeats_refused=repeats_refused,
        load=None
        if load_span is None
        else check_load(
            faults,
            ((o.started_at, o.ended_at) for o in outcomes if o.started_at is not None),
            *load_span,
            refusals,
            min_window_s=recovery_bound_s or 0.0,
        ),
        tools=tools,
        llm=llm,
    )


def _refusals(report: ChaosReport) -> str:
    if report.permission_violations is None:
        return "open broker"
    total = sum(report.permission_violations.values())
    return f"{total} ({_by_actor(report)})" if total else "0"


def _delegation_rows(report: ChaosReport) -> list[tuple[str, str]]:
    """The delegation mix's rows; none when the run had no delegations."""
    if not report.delegations:
        return []
    answered = sum(report.answered_by.values())
    how = ", ".join(f"{kind}: {n}" for kind, n in sorted(report.answered_by.items()))
    return [
        ("delegations", str(report.delegations)),
        ("  answered", f"{answered}" + (f" ({how})" if how else "")),
        ("  unanswered", str(len(report.unanswered))),
        ("  answered past their bound", str(len(report.late_answers))),
    ]


def format_report(report: ChaosReport, *, seed: int | None = None) -> str:
    """The checker's table, one promise per row, as `parley chaos` prints it."""
    worst = report.worst_recovery_s
    failed = sum(report.failed.values())
    reasons = ", ".join(f"{reason or '?'}: {n}" for reason, n in sorted(report.failed.items()))
    ended = ", ".join(f"{reason or '?'}: {n}" for reason, n in sorted(report.completed_by.items()))
    rows: list[tuple[str, str]] = [
        ("acknowledged messages", str(report.published)),
        ("applied", str(report.applied)),
        ("lost", str(len(report.lost))),
        ("duplicate effects", str(len(report.duplicate_effects))),
        ("past de-duplication", str(len(report.dedup_escapes))),
        ("sessions", str(report.sessions)),
        ("  completed", f"{report.completed}" + (f" ({ended})" if ended else "")),
        ("  failed (with reason)", f"{failed}" + (f" ({reasons})" if reasons else "")),
        ("  not completed", str(len(report.incomplete))),
        ("  ended past their bound", str(len(report.late))),
        (
            "longest session",
            "-" if report.longest_session_s is None else f"{report.longest_session_s:.2f} s",
        ),
        (
            "audit records",
            "no auditor" if report.audit_records is None else str(report.audit_records),
        ),
        *_delegation_rows(report),
        *(report.tools.rows() if report.tools is not None else ()),
        *(report.llm.rows() if report.llm is not None else ()),
        ("repeated ids refused", str(report.repeats_refused)),
        ("audit chain gaps", str(len(report.audit_gaps))),
        ("permission violations", _refusals(report)),
        ("faults injected", str(len(report.faults))),
        *(report.load.rows() if report.load is not None else ()),
        (
            "worst recovery",
            "-"
            if worst is None
            else ("never" if worst == float("inf") else f"{worst:.2f} s")
            + (
                f" (bound {report.recovery_bound_s:.1f} s)"
                if report.recovery_bound_s is not None
                else ""
            ),
        ),
    ]
    return "\n".join(verdict_table(rows, seed, report.violations()))
