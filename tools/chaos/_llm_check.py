"""The LLM mix's verdicts (`parley chaos --llm N`): each model call the gate admitted ended with
exactly one answer, a success or a typed failure, while the LLM gateway was SIGKILLed
mid-stream.

The gateway promises to answer each request id at most once (actors/llm/_answers.py): it
stores the answer before publishing it, a redelivered request publishes the stored answer again
under the same envelope id, and a request whose stream a crash cut short stored nothing, so it
is asked of the provider again. The promise is checked from the gate's decisions
(PARLEY_EVENTS), which name every `llm_request` the narrator sent and every `llm_response`
about one (`request_id`), admitted or refused:

- unanswered: an admitted call with no admitted answer: it vanished (a crash ate it, or
  the gate refused the answer and the brain was left waiting);
- answered twice: a call the gate admitted more than one answer for, or answers under more
  than one envelope id (the gateway answered it twice, whether or not the gate let both by);
- untyped failure: an answer that is no success and gives no code (a failure must say why);
- refused: a model call the gate refused (not a repeat): the bundle's scope is wrong, and
  the run did not test what it claims.

Figures beside them, from the provider's log and the gateway's: the streams the provider
began, finished and saw cut (the client gone mid-stream: a kill landed), and the requests the
gateway answered again from its store. Pure: decisions and counts in, verdict out.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from schemas import Decision, ErrorCode, derive_id

__all__ = ("LlmCheck", "ModelCall", "check_llm", "model_call_purpose", "model_calls_from")

_DELIVERIES = 64
_CALLS_PER_TURN = 8
"""How far `model_call_purpose` looks: past the run's max deliveries and the brain's calls."""


def model_call_purpose(decision: Decision) -> str:
    """What a model call is for, so the history checker tells a host's calls apart.

    A gateway brain's request id derives from the message its host handles, that message's
    delivery attempt and the call's number in the turn (actors/agent/_model_calls.py): a
    message delivered again after a crash asks its model again, under a new id, by design
    (the earlier answer may have come with no one waiting). So the place, read back from the
    id, is the purpose: a repeat under the same place is a duplicate, one after a redelivery
    is not. An id of no such place is told by its kind only.
    """
    place = _call_places(decision.causation_id).get(decision.envelope_id)
    return decision.envelope_kind + (f" ({place})" if place else "")


@functools.lru_cache(maxsize=4096)
def _call_places(cause_id: str) -> dict[str, str]:
    return {
        derive_id(cause_id, f"llm:{attempt}:{count}"): f"delivery {attempt}, call {count}"
        for attempt in range(_DELIVERIES)
        for count in range(1, _CALLS_PER_TURN + 1)
    }


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One `llm_request` the gate admitted, and every answer it decided about."""

    request_id: str
    answer_ids: frozenset[str] = frozenset()
    """The envelope ids of every answer naming it, admitted or refused."""
    answers: tuple[tuple[str, str], ...] = ()
    """(outcome, reason) of each answer the gate admitted, in stream order."""


def _repeat(decision: Decision) -> bool:
    return decision.code == ErrorCode.DUPLICATE_ENVELOPE and decision.rule == "duplicate_id"


def model_calls_from(decisions: Iterable[Decision], agent: str) -> tuple[list[ModelCall], int]:
    """The model calls `agent` made that the gate admitted, and how many it refused (repeats
    aside). `decisions` are in stream order."""
    calls: dict[str, ModelCall] = {}
    refused = 0
    answers: list[Decision] = []
    for decision in decisions:
        if decision.envelope_kind == "llm_response":
            answers.append(decision)
        elif decision.envelope_kind != "llm_request" or decision.sender != agent:
            continue
        elif decision.allowed:
            key = decision.request_id or decision.envelope_id
            calls.setdefault(key, ModelCall(key))
        elif not _repeat(decision):
            refused += 1
    for decision in answers:
        call = calls.get(decision.request_id or "")
        if call is None:
            continue
        admitted = ((decision.outcome, decision.reason),) if decision.allowed else ()
        calls[call.request_id] = ModelCall(
            call.request_id, call.answer_ids | {decision.envelope_id}, call.answers + admitted
        )
    return list(calls.values()), refused


@dataclass(frozen=True, slots=True)
class LlmCheck:
    """The LLM mix's verdict: its figures, and each broken promise's calls."""

    calls: int
    outcomes: dict[str, int]
    streams: Mapping[str, int]
    """The provider's streams: `started`, `done`, `cut` (tools/chaos/_llm_provider.py)."""
    from_store: int = 0
    """Requests the gateway answered again from its store (a redelivery after its answer)."""
    unanswered: tuple[str, ...] = ()
    answered_twice: tuple[str, ...] = ()
    untyped: tuple[str, ...] = ()
    refused: int = 0

    def violations(self) -> list[str]:
        found: list[str] = []
        for calls, what in (
            (self.unanswered, "model call(s) admitted and never answered"),
            (self.answered_twice, "model call(s) answered more than once"),
            (self.untyped, "model call(s) failed without a typed error"),
        ):
            if calls:
                found.append(f"{len(calls)} {what}")
        if self.refused:
            found.append(f"{self.refused} model call(s) refused by the gate")
        return found

    def rows(self) -> list[tuple[str, str]]:
        """The checker table's rows for the mix."""
        how = ", ".join(f"{outcome}: {n}" for outcome, n in sorted(self.outcomes.items()))
        streams = self.streams
        return [
            ("model calls admitted", f"{self.calls}" + (f" ({how})" if how else "")),
            (
                "  provider streams",
                f"{streams.get('started', 0)} begun, {streams.get('done', 0)} finished, "
                f"{streams.get('cut', 0)} cut mid-stream",
            ),
            ("  answered again from the store", str(self.from_store)),
            ("  unanswered", str(len(self.unanswered))),
            ("  answered more than once", str(len(self.answered_twice))),
            ("  failed, untyped", str(len(self.untyped))),
            ("model calls refused", str(self.refused)),
        ]


def check_llm(
    calls: Iterable[ModelCall],
    streams: Mapping[str, int] | None = None,
    from_store: int = 0,
    refused: int = 0,
) -> LlmCheck:
    """Judge the LLM mix: `calls` from the decisions (`model_calls_from`), `streams` the
    provider's counts, `from_store` the gateway's answers again, `refused` the calls the gate
    refused."""
    calls = list(calls)
    outcomes: dict[str, int] = {}
    for call in calls:
        for outcome, _ in call.answers[:1]:
            outcomes[outcome] = outcomes.get(outcome, 0) + 1

    def ids(chosen: Iterable[ModelCall]) -> tuple[str, ...]:
        return tuple(sorted(call.request_id for call in chosen))

    return LlmCheck(
        calls=len(calls),
        outcomes=outcomes,
        streams=dict(streams or {}),
        from_store=from_store,
        unanswered=ids(call for call in calls if not call.answers),
        answered_twice=ids(c for c in calls if len(c.answers) > 1 or len(c.answer_ids) > 1),
        untyped=ids(
            c for c in calls if any(o != "success" and not reason for o, reason in c.answers)
        ),
        refused=refused,
    )
