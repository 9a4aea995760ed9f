"""The router: seed 001's sessions, turn by turn, durable in the sessions bucket.

Public face: `RouterActor`, the process `parley run router` runs.

Inside: `_actor` (the process: inputs, session locks, effects), `_session` (the state and
its limits), `_opening` (a person's message opens a session), `_turns` (the turn loop, as
pure transitions), `_calling` (making a turn's call), `_steering` (the owner's pause, resume
and take over), `_turn_watch` (judging an agent's silence) and `_watcher` (its I/O), `_sweep`
(sessions stalled past their deadline, pure) and `_sweeper` (the sweep's rounds), `_effects`
(publishing a transition's calls, reminders, events and refusals), `_store` (sessions in KV),
and `_orchestrated` (seed 000's orchestrated sessions, whose transitions are
actors/orchestrator's). The
transcript window a turn is shown is `schemas.transcript_window`, shared with the agent host.
"""

from actors.router._actor import RouterActor

__all__ = ("RouterActor",)
