"""Orchestrated sessions (seed 000): a person's local agent talks to a shared agent.

Public face: the pure state machine the router runs for sessions opened with
`mode = "orchestrate"` (the router stays the one actor that owns sessions and their
storage; this package decides what each input does to one).

Inside: `_state` (the stored session, its states and effects), `_options` (the router's
`orchestration` options), `_history` (bounded history and its summary), `_risk`
(`semi_auto`'s review rules), `_events` (a transition's ids and timeline events), `_calls`
(the draft request and the send), `_opening`, `_loop` (answers, failures, limits),
`_controls` (the owner's controls), `_advance` (one input, replayed or applied).
"""

from actors.orchestrator._advance import advance_orchestration, is_deadline_reminder
from actors.orchestrator._calls import SUMMARY_NAME, local_prompt
from actors.orchestrator._history import bound_history
from actors.orchestrator._opening import DEADLINE_REMINDER, open_orchestration
from actors.orchestrator._options import OrchestrationOptions
from actors.orchestrator._risk import review_reasons
from actors.orchestrator._state import (
    ENDED,
    Approval,
    OrchestratedSession,
    PendingCall,
    Reminder,
    State,
    Step,
    Turn,
)

__all__ = (
    "DEADLINE_REMINDER",
    "ENDED",
    "SUMMARY_NAME",
    "Approval",
    "OrchestratedSession",
    "OrchestrationOptions",
    "PendingCall",
    "Reminder",
    "State",
    "Step",
    "Turn",
    "advance_orchestration",
    "bound_history",
    "is_deadline_reminder",
    "local_prompt",
    "open_orchestration",
    "review_reasons",
)
