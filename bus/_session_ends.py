"""Whether the session an action is asked in has ended: nothing more is done in it.

A person who stops a task (`parley task`'s Ctrl-C, the console's cancel) ends its session at
the router, but the agent working on it learns nothing of that: its brain went on asking for
tool steps and model calls for minutes, each run (files written, commits made, a provider
paid) in a session its person had cancelled, and an approval given meanwhile to a request
held from before the stop ran it. The executing actor is the last place that can refuse an
effect, so the tool runtime (before it holds or runs a step) and the LLM gateway (before it
calls a provider) ask how the session stands: the router keeps a copy of each session's
opening and of its end on `parley.standing.<owner>.<session>` (`Namespace.standing`), whose
last message they read by a direct get (one read an action; an end, once seen, is
remembered).

A session no router keeps a standing for (a delegation's, an orchestration's) reads as
running. A read that fails (the server restarting) lets the action go on, as before this
check: its own stores would fail the same way. Two reads in a row unanswered within `_READ_S`
each are what a broker config written before the read was granted looks like: then actions go
on unasked for `_UNREADABLE_FOR_S`, said once, rather than each waiting `_READ_S` for nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Final

from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from schemas import DecodeError, Namespace, SessionEvent, decode_envelope

__all__ = ("ENDS", "EndedSessions")

log = logging.getLogger("parley.bus.session_ends")

ENDS: Final = {
    "session_completed": "completed",
    "session_failed": "failed",
    "session_canceled": "canceled",
}
_READ_S: Final = 2.0
"""How long one read may take: a local server answers in a millisecond."""
_UNREADABLE_FOR_S: Final = 10.0
"""After two reads in a row went unanswered, how long actions go on without asking again: a
broker config written before the actor was granted the read answers nothing, and each action
would wait `_READ_S` for it. Short, since an election's silence looks the same."""
_REMEMBERED: Final = 4096


class EndedSessions:
    """How sessions stand, read from their standing, with the ends already seen."""

    def __init__(self, js: JetStreamContext, ns: Namespace) -> None:
        self._js = js
        self._ns = ns
        self._stream = ns.stream("events")
        self._ended: dict[tuple[str, str], str] = {}
        self._unreadable_until = 0.0
        self._unanswered = 0

    async def ended(self, owner: str, session: str) -> str | None:
        """How `owner`'s session `session` ended (`canceled`, `completed`, `failed`), or None
        while it runs, when no standing is kept for it, or when it cannot be read now."""
        if not owner or not session:
            return None
        known = self._ended.get((owner, session))
        if known is not None:
            return known
        if time.monotonic() < self._unreadable_until:
            return None
        try:
            async with asyncio.timeout(_READ_S):
                msg = await self._js.get_msg(
                    self._stream, subject=self._ns.standing(owner, session), direct=True
                )
        except NotFoundError:
            return None
        except TimeoutError as exc:  # nats-py's too: unanswered, a missing grant's symptom
            self._unanswered += 1
            if self._unanswered >= 2:
                self._unanswered = 0
                self._unreadable_until = time.monotonic() + _UNREADABLE_FOR_S
                log.warning(
                    "could not read how sessions stand: actions go on unasked for a while (is "
                    "the broker config older than this release? run `parley nats-config` again)",
                    extra={"error": repr(exc), "for_s": _UNREADABLE_FOR_S},
                )
            return None
        except NatsError as exc:
            log.warning(
                "could not read how a session stands: the action goes on",
                extra={"session": session, "error": repr(exc)},
            )
            return None
        self._unanswered = 0
        try:
            event = decode_envelope(msg.data or b"")
        except DecodeError:
            return None
        if not isinstance(event, SessionEvent) or event.event_type not in ENDS:
            return None
        how = ENDS[event.event_type]
        if len(self._ended) >= _REMEMBERED:
            self._ended.pop(next(iter(self._ended)))
        self._ended[(owner, session)] = how
        return how
