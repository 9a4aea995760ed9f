"""How long a command following a session waits for its next event, and what for.

The session's own clock decides: each call the router makes carries the moment the session
ends at the latest (`ends_by`, its deadline plus the sweep's margin), and the command waits
until then plus `SLACK_S` before it says what it was waiting for and gives up (tools/collab.py).

A tool request held for the person's approval outlasts that: the agent's call waits as long
as the request does, and the router moves the call's deadline to a whole turn after the
request expires, then keeps it there once the request is decided
(actors/router/_approval_wait.py). The command moves its own wait the same way, from what its
timeline says: the gate's `approval_requested` names how long the request waits
(`expires_in_s`, the approval rule's `timeout_s`), and the runtime's answer to the request (its
`tool_completed`, naming the request as `call_id`) says it was decided. Judged by the turn
alone, `parley say` gave up on a session that waited for its own person's decision, and
stopped it, while the request could still be approved. A command that joins a session held
so (`parley collab --follow`) has seen no call start: the session's opening, which the
router keeps (`session_created`), names its turn and the sweep's margin.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from schemas import SessionEvent, utc_now

__all__ = ("OPENING_S", "SLACK_S", "SessionWait")

OPENING_S: Final = 60.0
"""How long to wait for a session to open (its first call names its own deadline)."""
SLACK_S: Final = 10.0
"""Past a session's `ends_by`: the router's sweep runs every few seconds."""


class SessionWait:
    """The deadline a followed session's events keep moving, and the words for the wait."""

    def __init__(self, waiting_for: str) -> None:
        self.ends_by: datetime | None = None
        self._opening = waiting_for
        self._call: tuple[str | None, int | None] | None = None
        """The speaker and round of the running call, once one started."""
        self._turn: timedelta | None = None
        self._held: dict[str, datetime] = {}
        """Each request held for the person's approval, and when it expires."""

    @property
    def waiting_for(self) -> str:
        """What the command waits for, as its waiting and giving-up lines say."""
        if self._held:
            approval_id, expires = max(self._held.items(), key=lambda held: held[1])
            return f"your decision on {approval_id} (it waits until {expires:%H:%M:%S} UTC)"
        if self._call is None:
            return self._opening
        speaker, round_ = self._call
        due = f", due by {self.ends_by:%H:%M:%S} UTC" if self.ends_by else ""
        return f"{speaker}'s answer in round {round_}{due}"

    def wait_s(self) -> float:
        """How long to wait for the next event: to `ends_by` plus slack."""
        if self.ends_by is None:
            return OPENING_S
        return max((self.ends_by - utc_now()).total_seconds(), 0.0) + SLACK_S

    def on_event(self, event: SessionEvent) -> None:
        """Move the deadline, and say what is awaited, as `event` tells."""
        payload = event.payload
        if event.event_type == "session_created":
            turn_s = _seconds(payload.get("turn_timeout_s"))
            margin_s = _seconds(payload.get("stall_margin_s"))
            if self._turn is None and turn_s is not None and margin_s is not None:
                self._turn = timedelta(seconds=turn_s + margin_s)  # a call's own says better
        elif event.event_type == "step_started":
            self.ends_by = _when(payload.get("ends_by"))
            if self.ends_by is not None:
                self._turn = self.ends_by - event.created_at
            self._call = (event.speaker, event.round)
            if self._held:  # still held from an earlier call: the router waits for it too
                self._later(max(self._held.values()) + self._turn_or_opening())
        elif event.event_type == "approval_requested":
            expires_in_s = payload.get("expires_in_s")
            if not isinstance(expires_in_s, int) or isinstance(expires_in_s, bool):
                return  # from a gate that does not say: the turn alone decides, as before
            approval_id = str(payload.get("approval_id", ""))
            expires = event.created_at + timedelta(seconds=expires_in_s)
            self._held[approval_id] = expires
            self._later(expires + self._turn_or_opening())
        elif event.event_type == "tool_completed" and payload.get("call_id") in self._held:
            del self._held[str(payload["call_id"])]
            self._later(event.created_at + self._turn_or_opening())

    def _turn_or_opening(self) -> timedelta:
        return self._turn or timedelta(seconds=OPENING_S)

    def _later(self, when: datetime) -> None:
        if self.ends_by is None or when > self.ends_by:
            self.ends_by = when


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)


def _when(value: object) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None
