"""The inputs of each session whose effects this router sent and JetStream has not all stored.

The router stores a session's new state before it sends the transition's effects, and acks
the input once they are stored. When some are refused (the events stream electing its
leader), the input is retried after a backoff, but the session may move on meanwhile: the
call went out, its agent answered, and that answer's events were stored first, the refused
ones only at the retry, after them (after the session's end, even). A person following the
timeline to its end would miss them. So the router remembers, per session, the inputs it sent
effects for until each is acked, and a later input of the session sends their events again
before its own (the same ids: JetStream drops a copy already stored).

Only for `REPLAY_WITHIN_S` after an input was sent, well inside JetStream's duplicate window (a
copy sent past it would be stored twice), and only in this process: another replica, or this
one restarted, does not know, and then the order is the stream's.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from bus import Outbox

__all__ = ("REPLAY_WITHIN_S", "UnsettledInputs")

REPLAY_WITHIN_S = 60.0
"""How long after it was sent an input's events may be sent again (JetStream drops repeats
for 120 s by default)."""
_SESSIONS_KEPT = 4096
_INPUTS_KEPT = 8


class UnsettledInputs:
    """Per session, the inputs sent and not yet acked, oldest first."""

    def __init__(self) -> None:
        self._sessions: OrderedDict[str, dict[str, float]] = OrderedDict()

    def sent(self, session_id: str, input_id: str, outbox: Outbox) -> None:
        """`input_id`'s effects are in `outbox`: remembered until its input is acked."""
        inputs = self._sessions.setdefault(session_id, {})
        inputs.setdefault(input_id, time.monotonic())
        while len(inputs) > _INPUTS_KEPT:
            del inputs[next(iter(inputs))]
        self._sessions.move_to_end(session_id)
        while len(self._sessions) > _SESSIONS_KEPT:
            self._sessions.popitem(last=False)
        outbox.when_acked(lambda: self._settled(session_id, input_id))

    def before(self, session_id: str, input_id: str) -> list[str]:
        """The inputs of the session sent before `input_id` (recently) and not yet acked,
        oldest first: none sent after it, which a retry of an earlier input must not precede."""
        inputs = self._sessions.get(session_id)
        if not inputs:
            return []
        now = time.monotonic()
        for stale in [i for i, at in inputs.items() if now - at > REPLAY_WITHIN_S]:
            del inputs[stale]
        earlier: list[str] = []
        for sent in inputs:
            if sent == input_id:
                break
            earlier.append(sent)
        return earlier

    def _settled(self, session_id: str, input_id: str) -> None:
        inputs = self._sessions.get(session_id)
        if inputs is None:
            return
        inputs.pop(input_id, None)
        if not inputs:
            del self._sessions[session_id]
