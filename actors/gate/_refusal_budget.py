"""How many of one sender's submissions the gate refuses on the record, a minute.

A refusal is not free: the gate claims the envelope's id (8 days in `idempotency`), delivers
an error to the sender (`PARLEY_DELIVER`, until read), publishes a decision (`PARLEY_EVENTS`)
that the auditor appends to the history (`PARLEY_AUDIT`, kept for ever by default), about
3.6 KB in all. The policy's rate limit is charged on admission only, so a principal sending
as fast as it can, every submission refused, wrote those records at the speed of the gate
(about 600 a second from one client): measured, it filled `idempotency` in about 17 minutes,
and then no admission of anyone's could be claimed.

So each sender has a budget of refusals on the record a minute (`refusals_per_minute`, a
window opened by its first refusal). The refusal that spends the last of it tells the sender,
in its error, that until the window ends its refused submissions are refused quietly: nothing
is claimed, delivered, decided or audited for them (a submission that does not decode is still
dead-lettered by the runtime, bounded per sender). Its admissible submissions are decided and
admitted as ever, each id claimed once it is admitted rather than before: a flood of bad ones
costs a sender no good one. What one sender writes is then bounded by its budget and its rate
limit, whatever it sends.

A caller waiting on an answer refused quietly is not told: it waits for its deadline, as for an
answer never sent. The senders that submit for many principals (the router, the tool runtime,
the LLM gateway: `exempt`) are always on the record, since their refusals come from other
principals' traffic, which the gate bounds where it enters; a relay submits as each name it
serves, each with a budget of its own. A refusal for want of a policy bundle is the gate's
state, not the sender's doing, and spends nothing (nor one for an expired bundle). Only a first
delivery is refused quietly: a redelivery may follow an attempt that recorded something.

Each gate replica counts for itself, in memory: with several replicas a sender's budget is
theirs added up, and a restarted replica begins afresh. A bound, not an account.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

__all__ = ("DEFAULT_EXEMPT", "RefusalBudget")

log = logging.getLogger("parley.actors.gate")

DEFAULT_EXEMPT = ("router", "tools", "llm")
"""The principals that submit for many others: their refusals are always on the record."""

_WINDOW_S = 60.0
_FORGET_PAST = 10_000
"""Senders remembered before those whose window ended are forgotten."""


@dataclass(slots=True)
class _Window:
    opened: float
    refused: int = 0


class RefusalBudget:
    """Counts each sender's refusals in a window of a minute; says when to refuse quietly."""

    def __init__(
        self,
        per_minute: int,
        exempt: Collection[str] = DEFAULT_EXEMPT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_minute = per_minute
        self._exempt = frozenset(exempt)
        self._clock = clock
        self._windows: dict[str, _Window] = {}

    def spend(self, sender: str) -> str:
        """Count one refusal of `sender`'s; returns what its error should add when this one
        spends the last of its budget (the quiet it now meets, and for how long), else ''."""
        if sender in self._exempt:
            return ""
        now = self._clock()
        window = self._windows.get(sender)
        if window is None or now - window.opened >= _WINDOW_S:
            if window is None and len(self._windows) >= _FORGET_PAST:
                self._forget_ended(now)
            window = self._windows[sender] = _Window(now)
        window.refused += 1
        if window.refused != self.per_minute:
            return ""
        log.warning(
            "a sender's refusals go unrecorded for the rest of the minute",
            extra={"sender": sender, "refusals_per_minute": self.per_minute},
        )
        return (
            f" ({sender}'s submissions were refused {self.per_minute} times within a minute, "
            f"its budget: for the next {self._left_s(window, now):.0f} s the gate refuses them "
            "without a word, no error and no record, and admits admissible ones as ever; read "
            "the refusals' reasons)"
        )

    def quiet(self, sender: str) -> bool:
        """Whether a refusal of a new submission of `sender`'s goes unrecorded now."""
        window = self._windows.get(sender)
        if window is None or window.refused < self.per_minute:
            return False
        return self._clock() - window.opened < _WINDOW_S

    @staticmethod
    def _left_s(window: _Window, now: float) -> float:
        return max(0.0, window.opened + _WINDOW_S - now)

    def _forget_ended(self, now: float) -> None:
        ended = [name for name, w in self._windows.items() if now - w.opened >= _WINDOW_S]
        for name in ended:
            del self._windows[name]
