"""A trace's calls awaiting their answer, and what an answer finds of its call: pure, flat.

A trace's record (`TraceState`) is read and rewritten at every hop of the trace, so it holds
only what does not grow with the trace: its counters and the calls still awaiting an answer
(`live`, for the objectives in progress and the fan-out). Which answer closed a call is kept
in a record of its own (`CallAnswer`, at `answer_key(call_id)`), read only by an answer to
that call. A decision therefore reads and writes the same few small records whether its
trace holds ten envelopes or ten thousand.

An answer's charge is two writes of one commit: the trace's (its count and tokens, the call
out of `live`) and the call's answer record (created compare-and-set on revision 0). Either
may be stored without the other: another replica created the answer record first (its
answer is the call's one answer), or the gate was killed between the two acknowledgements.
What the two records say together tells what is left to do, so an answer decided again
(retried, redelivered after a crash) is neither charged twice nor lost:

| in `live` | answer record  | meaning                                 | decided              |
|-----------|----------------|-----------------------------------------|----------------------|
| yes       | none           | open                                    | admit, charge both   |
| yes       | this answer    | the trace's write was lost              | admit, charge trace  |
| no        | this answer    | both stored: a redelivery               | admit, charge none   |
| either    | another answer | answered already                        | refuse (duplicate)   |
| no        | none           | the answer record's write was lost, or  | admit, create record |
|           |                | the call passed its grace (see below)   |                      |

The last row cannot tell a lost write from a call that left `live` unanswered after its grace
(`ANSWER_GRACE_MS` past its deadline), unless the call's level names its deadline: then one
that far past it is refused as before. Without one, such a late answer is admitted once
(the record it creates refuses any other) and charged nothing.

Traces recorded by gates before flat decisions keep every call in `open_calls`, answered
ones with the answer that closed them: those are read on (`trace_calls`), their open calls
move into `live` at the trace's next write, and their answered ones are carried until they
pass their grace, as those gates kept them.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.gate._records import CallAnswer, LiveCall, OpenCall, TraceState

__all__ = ("ANSWER_GRACE_MS", "Closing", "TraceCalls", "closing_of", "trace_calls")

ANSWER_GRACE_MS = 3_600_000
"""How long past its deadline an unanswered call stays in its trace's record, still open to
its one answer. Its deadline only ends its counting towards objectives in progress: a model may
answer after the deadline, and that answer must still reach its caller."""


@dataclass(frozen=True, slots=True)
class TraceCalls:
    """A trace's calls as a decision at some moment sees them (fresh dicts, to be changed)."""

    live: dict[str, LiveCall]
    """Calls not answered yet and within their grace, by id."""
    answered_before: dict[str, OpenCall]
    """Calls a gate before flat decisions recorded as answered, within their grace."""

    def in_progress(self, call_id: str, now_ms: int) -> bool:
        """Whether `call_id` is a call of this trace that still counts as being worked on:
        not answered, and not past its deadline."""
        call = self.live.get(call_id)
        return call is not None and call.expires_ms > now_ms

    def objective_in_progress(self, objective: str, now_ms: int, but: str) -> bool:
        """Whether another call of this trace (not `but`) works on `objective` now; a scan of
        the calls awaiting an answer only, never of the trace."""
        return any(
            call.objective == objective and call.expires_ms > now_ms
            for call_id, call in self.live.items()
            if call_id != but
        )


def trace_calls(trace: TraceState, now_ms: int) -> TraceCalls:
    """The calls of `trace` at `now_ms`: those past their grace left out, and those a gate
    before flat decisions recorded (`open_calls`) taken in."""
    live = {
        call_id: call
        for call_id, call in trace.live.items()
        if call.expires_ms + ANSWER_GRACE_MS > now_ms
    }
    answered: dict[str, OpenCall] = {}
    for call_id, old in trace.open_calls.items():
        if old.expires_ms + ANSWER_GRACE_MS <= now_ms:
            continue
        if old.in_progress:
            live.setdefault(call_id, LiveCall(objective=old.objective, expires_ms=old.expires_ms))
        else:
            answered[call_id] = old
    return TraceCalls(live=live, answered_before=answered)


@dataclass(frozen=True, slots=True)
class Closing:
    """What an answer finds of the call it answers, and what admitting it is left to do."""

    admit: bool
    """False: the call was answered by another answer (or is past its grace)."""
    charge_trace: bool = False
    """Whether the trace is still to be charged with this answer (count, tokens, the call
    out of `live`)."""
    create_record: bool = False
    """Whether the call's `CallAnswer` is still to be created, naming this answer."""


_ANSWERED = Closing(admit=False)


def closing_of(
    calls: TraceCalls,
    recorded: CallAnswer | None,
    call_id: str,
    answer_id: str,
    deadline_ms: int | None,
    now_ms: int,
) -> Closing:
    """What answer `answer_id` finds of call `call_id`, from its trace's calls and the call's
    answer record (None: none stored); `deadline_ms`: the call's deadline as its level
    recorded it (None: it named none). The table in this module's docstring."""
    old = calls.answered_before.get(call_id)
    if old is not None:
        return Closing(admit=True) if old.answered_by == answer_id else _ANSWERED
    still_open = call_id in calls.live
    if recorded is not None:
        if recorded.answer_id != answer_id:
            return _ANSWERED
        return Closing(admit=True, charge_trace=still_open)
    if still_open:
        return Closing(admit=True, charge_trace=True, create_record=True)
    if deadline_ms is not None and deadline_ms + ANSWER_GRACE_MS <= now_ms:
        return _ANSWERED
    return Closing(admit=True, create_record=True)
