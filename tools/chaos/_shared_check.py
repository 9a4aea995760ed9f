"""The checker of `parley chaos --shared`: what must hold of orchestrated sessions whose shared
agent lives on another deployment, after relays, the local agent host, the router and the
gateway were killed under them.

Pure, like tools/chaos/_checker.py: facts in (read from both deployments' streams by
tools/chaos/_shared_records.py), verdict out, so it is tested on hand-made histories. Issue
16's rule, one promise per row:

- every session ends: completed, or in `error` with a reason a person reads; never stuck;
- never a duplicate send: Bob's gate admits at most one call to the shared agent per (session,
  turn) of Alice's. A retry of a turn under a new envelope that reaches Bob counts as a second
  send just as a frame delivered twice would; a call Bob admitted that no session of Alice's
  sent is a violation too (it came from nowhere);
- never a lost answer: each answer Bob's gate admitted from the shared agent reaches Alice's
  session (a session event consumes the answer Alice's gate admitted for that call), unless
  the session ended in `error` with a reason;
- both audit chains verify;
- the load held: a session started in every fault window, the load's refusals counted and
  shown (tools/chaos/_verdicts.py): faults that hit an idle system prove nothing.

How soon sessions moved again after each fault is reported, not judged: the promise here is
that they end, which the first row checks.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tools.chaos._checker import Fault, SessionOutcome
from tools.chaos._verdicts import LoadCheck, check_load, recoveries, verdict_table

__all__ = (
    "AuditCheck",
    "Send",
    "SharedHistory",
    "SharedReport",
    "check_shared",
    "format_shared_report",
)


@dataclass(frozen=True, slots=True)
class Send:
    """Alice's router sent turn `turn` of `session_id` as call `alice_call`; Bob's deployment
    knows that call as `bob_call` (the id Bob's relay submits it under)."""

    session_id: str
    turn: int
    alice_call: str
    bob_call: str


@dataclass(frozen=True, slots=True)
class AuditCheck:
    """One side's audit chain: how many records were verified, and what was wrong."""

    side: str
    records: int | None
    """None: the side's chain could not be read (no auditor key, or no records at all)."""
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class SharedHistory:
    """What the run stored, on both sides.

    `bob_calls`: ids of the calls Bob's gate admitted from Alice's device to the shared agent.
    `bob_answers`: (answer id, call id it answers) that Bob's gate admitted from the shared
    agent back to Alice's device. `alice_answers`: Alice's call id -> the answers to it that
    Alice's gate admitted (the relay's, in the shared agent's name). `consumed`: every id a
    session event of Alice's names as an input it applied.
    """

    sessions: Sequence[SessionOutcome]
    sends: Sequence[Send]
    bob_calls: Sequence[str]
    bob_answers: Sequence[tuple[str, str]]
    alice_answers: Mapping[str, frozenset[str]]
    consumed: frozenset[str]
    audits: Sequence[AuditCheck] = ()
    faults: Sequence[Fault] = ()
    progress: Sequence[float] = ()
    """When each of Alice's session events was stored (Unix seconds)."""
    told: Mapping[str, str] = field(default_factory=dict)
    """For each stop reason of a session in error, the first reason a person was told."""
    load_span: tuple[float, float] | None = None
    """When the load started and stopped opening sessions (Unix seconds); None: not judged."""
    refusals: Mapping[str, int] = field(default_factory=dict)
    """The error answers the person's sessions were opened with, by code (RATE_LIMITED, ...)."""
    min_window_s: float = 0.0
    """The shortest fault window judged alone (tools/chaos/_verdicts.py)."""


@dataclass(frozen=True)
class SharedReport:
    """The verdict; `violations()` names every broken promise."""

    sessions: int
    completed_by: dict[str, int]
    failed_by: dict[str, int]
    incomplete: tuple[str, ...]
    sends: int
    bob_calls: int
    duplicate_sends: tuple[tuple[str, int], ...]
    unattributed_calls: tuple[str, ...]
    bob_answers: int
    answers_reached: int
    answers_to_ended_sessions: int
    lost_answers: tuple[str, ...]
    audits: tuple[AuditCheck, ...]
    faults: tuple[Fault, ...] = ()
    recovery_s: tuple[float | None, ...] = ()
    longest_session_s: float | None = None
    by_target: dict[str, int] = field(default_factory=dict)
    told: dict[str, str] = field(default_factory=dict)
    load: LoadCheck | None = None

    def violations(self) -> list[str]:
        found: list[str] = []
        if not self.sessions:
            found.append("no session ran")
        if self.incomplete:
            found.append(f"{len(self.incomplete)} session(s) neither completed nor in error")
        if self.failed_by.get("", 0):
            found.append(f"{self.failed_by['']} session(s) in error without a reason")
        if self.duplicate_sends:
            found.append(f"{len(self.duplicate_sends)} turn(s) sent to the shared agent twice")
        if self.unattributed_calls:
            found.append(f"{len(self.unattributed_calls)} call(s) Bob admitted no session sent")
        if self.lost_answers:
            found.append(f"{len(self.lost_answers)} answer(s) Bob admitted never reached Alice")
        for audit in self.audits:
            if audit.records is None:
                found.append(f"{audit.side}'s audit chain could not be read")
            elif audit.problems:
                found.append(f"{audit.side}'s audit chain broken: {len(audit.problems)} problem(s)")
        if self.load is not None:
            found += self.load.violations()
        return found


def check_shared(history: SharedHistory) -> SharedReport:
    """Judge one `--shared` run's history."""
    outcomes = list(history.sessions)
    completed_by: Counter[str] = Counter()
    failed_by: Counter[str] = Counter()
    incomplete: list[str] = []
    errored: set[str] = set()
    for outcome in outcomes:
        if outcome.ended == "completed":
            completed_by[outcome.reason or "?"] += 1
        elif outcome.ended == "failed":
            failed_by[outcome.reason or ""] += 1
            if outcome.reason:
                errored.add(outcome.session_id)
        else:
            incomplete.append(outcome.session_id)
    by_bob_call = {send.bob_call: send for send in history.sends}
    admitted: defaultdict[tuple[str, int], set[str]] = defaultdict(set)
    unattributed: list[str] = []
    for call in set(history.bob_calls):
        send = by_bob_call.get(call)
        if send is None:
            unattributed.append(call)
        else:
            admitted[(send.session_id, send.turn)].add(call)
    duplicates = tuple(sorted(turn for turn, calls in admitted.items() if len(calls) > 1))
    reached = ended = 0
    lost: list[str] = []
    for answer, call in dict(history.bob_answers).items():
        send = by_bob_call.get(call)
        answers_here = history.alice_answers.get(send.alice_call, frozenset()) if send else None
        if answers_here and answers_here & history.consumed:
            reached += 1
        elif send is not None and send.session_id in errored:
            ended += 1
        else:
            lost.append(answer)
    return SharedReport(
        sessions=len(outcomes),
        completed_by=dict(completed_by),
        failed_by=dict(failed_by),
        incomplete=tuple(sorted(incomplete)),
        sends=len(history.sends),
        bob_calls=len(set(history.bob_calls)),
        duplicate_sends=duplicates,
        unattributed_calls=tuple(sorted(unattributed)),
        bob_answers=len(dict(history.bob_answers)),
        answers_reached=reached,
        answers_to_ended_sessions=ended,
        lost_answers=tuple(sorted(lost)),
        audits=tuple(history.audits),
        faults=tuple(history.faults),
        recovery_s=recoveries(history.faults, history.progress),
        longest_session_s=max((t for o in outcomes if (t := o.took_s) is not None), default=None),
        by_target=dict(Counter(fault.target for fault in history.faults)),
        told=dict(history.told),
        load=None
        if history.load_span is None
        else check_load(
            history.faults,
            ((o.started_at, o.ended_at) for o in outcomes if o.started_at is not None),
            *history.load_span,
            history.refusals,
            min_window_s=history.min_window_s,
        ),
    )


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{key or '?'}: {n}" for key, n in sorted(counts.items()))


def _cut(text: str, width: int = 90) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _audit_value(audit: AuditCheck) -> str:
    if audit.records is None:
        return "not read"
    return f"{audit.records} records, " + (
        f"{len(audit.problems)} problem(s): {'; '.join(audit.problems)}"
        if audit.problems
        else "verified"
    )


def _recovery(values: Iterable[float | None]) -> str:
    values = list(values)
    if not values:
        return "-"
    if any(value is None for value in values):
        return "never (no session event after a fault)"
    return f"{max(value for value in values if value is not None):.2f} s"


def format_shared_report(report: SharedReport, *, seed: int | None = None) -> str:
    """The checker's table, one promise per row, as `parley chaos --shared` prints it."""
    completed = sum(report.completed_by.values())
    failed = sum(report.failed_by.values())
    rows: list[tuple[str, str]] = [
        ("sessions", str(report.sessions)),
        (
            "  completed",
            f"{completed}" + (f" ({_counts(report.completed_by)})" if completed else ""),
        ),
        (
            "  in error (with reason)",
            f"{failed}" + (f" ({_counts(report.failed_by)})" if failed else ""),
        ),
        *((f"    told ({why})", _cut(text)) for why, text in sorted(report.told.items())),
        ("  not ended", str(len(report.incomplete))),
        (
            "longest session",
            "-" if report.longest_session_s is None else f"{report.longest_session_s:.2f} s",
        ),
        ("turns sent (attempts)", str(report.sends)),
        ("calls Bob's gate admitted", str(report.bob_calls)),
        ("  turns sent twice", str(len(report.duplicate_sends))),
        ("  sent by no session", str(len(report.unattributed_calls))),
        ("answers Bob's gate admitted", str(report.bob_answers)),
        ("  reached Alice's session", str(report.answers_reached)),
        ("  to a session ended in error", str(report.answers_to_ended_sessions)),
        ("  lost", str(len(report.lost_answers))),
        *((f"audit chain, {a.side}", _audit_value(a)) for a in report.audits),
        ("faults injected (SIGKILL)", f"{len(report.faults)} ({_counts(report.by_target)})"),
        ("slowest progress after a fault", _recovery(report.recovery_s)),
        *(report.load.rows() if report.load is not None else ()),
    ]
    lines = verdict_table(rows, seed, report.violations())
    return "\n".join([*lines, *_culprits(report)])


def _culprits(report: SharedReport, shown: int = 5) -> list[str]:
    """Which sessions, turns and ids broke a promise (the first few of each), to look up."""
    found = [
        ("not ended", report.incomplete),
        ("sent twice (session, turn)", tuple(f"{s} {t}" for s, t in report.duplicate_sends)),
        ("calls sent by no session", report.unattributed_calls),
        ("answers lost", report.lost_answers),
    ]
    return [
        f"  {what}: " + ", ".join(ids[:shown]) + (" …" if len(ids) > shown else "")
        for what, ids in found
        if ids
    ]
