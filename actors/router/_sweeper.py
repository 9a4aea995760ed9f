"""The sweep's rounds: every `sweep_every_s`, each router replica reads the running sessions
and ends those stalled past their deadline plus `stall_margin_s`.

The rule of what counts as stalled is pure (actors/router/_sweep.py); this is its I/O: listing
the sessions bucket, reading each running session, and sending each stalled one the input
that ends it on the router's reminder queue, so the ending is handled, stored and acked like
any other input (by whichever replica reads it), and a lost reminder cannot leave a session
running for ever.
"""

from __future__ import annotations

import asyncio
import logging

from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from actors.router._session import Limits, Session
from actors.router._store import SessionStore
from actors.router._sweep import stalled
from bus import TraceHeaders, Uptime
from schemas import encode, utc_now, valid_token

__all__ = ("SessionSweeper",)

log = logging.getLogger("parley.actors.router")

_LIST_TIMEOUT_S = 30.0
"""Listing the sessions may take this long before the sweep gives up until next time."""
_LISTING_GONE_S = 5.0
"""How soon the server deletes a listing's consumer once the listing has stopped: nats-py
leaves a watch's ordered consumer to its inactivity threshold, five minutes by default,
which kept about thirty idle consumers per router replica on the sessions bucket (a
listing every `sweep_every_s`). While the listing reads, the consumer has interest and is
never inactive."""
_CLOSED_KEPT = 65_536
"""Ended sessions the sweep remembers so as not to read them again (it forgets them all at
once past this many, and reads each once more)."""


class SessionSweeper:
    """Finds stalled sessions and sends each the input that ends it."""

    def __init__(
        self,
        js: JetStreamContext,
        kv: KeyValue,
        store: SessionStore[Session],
        timers: str,
        actor_id: str,
        limits: Limits,
        uptime: Uptime,
    ) -> None:
        self._js, self._kv, self._store = js, kv, store
        self._timers, self.actor_id = timers, actor_id
        self._limits, self._uptime = limits, uptime
        self._closed: set[str] = set()

    async def sweep(self) -> int:
        """Find running sessions unmoved past their deadline plus the margin; send each the
        input that ends it (on the reminder queue, so it is handled, stored and acked like any
        other input). Returns how many were found.

        A read that fails (JetStream away) is logged and tried again next time: the sweep is
        a safety net, and must not take the router down with it.
        """
        try:
            keys = await self._session_keys(self._kv)
        except Exception as exc:
            log.warning("sweep could not list sessions", extra={"error": repr(exc)})
            return 0
        if len(self._closed) > _CLOSED_KEPT:
            self._closed.clear()
        found = 0
        for key in keys:
            session_id = key.removeprefix("session.")
            if session_id in self._closed or not valid_token(session_id):
                continue
            try:
                stored = await self._store.load(session_id, fresh=True)
            except Exception as exc:
                log.warning("sweep could not read a session", extra={"error": repr(exc)})
                return found
            if stored is None or not stored.session.open:
                self._closed.add(session_id)
                continue
            error = stalled(
                stored.session, now=utc_now(), limits=self._limits, outages=self._uptime.deaf()
            )
            if error is None:
                continue
            found += 1
            log.warning(
                "session stalled", extra={"session_id": session_id, "reason": error.message}
            )
            # The trace of its opening message, so the ending joins the session's trace.
            headers = TraceHeaders(
                trace_id=stored.session.origin_id, origin=self.actor_id
            ).to_headers(error.id)
            try:
                await self._js.publish(self._timers, encode(error), headers=headers)
            except Exception as exc:
                log.warning("sweep could not send its input", extra={"error": repr(exc)})
                return found
        return found

    @staticmethod
    async def _session_keys(kv: KeyValue) -> list[str]:
        """Every `session.*` key (not the trace links), read with headers only.

        nats-py's `KeyValue.keys(filters=...)` matches its filters as substrings of keys
        read from the whole bucket; a watch on the subject reads only the sessions.
        """
        keys: list[str] = []
        async with asyncio.timeout(_LIST_TIMEOUT_S):
            watcher = await kv.watch(
                "session.>",
                ignore_deletes=True,
                meta_only=True,
                inactive_threshold=_LISTING_GONE_S,
            )
            try:
                async for entry in watcher:
                    if entry is None:
                        break  # the end of what was stored when the watch began
                    keys.append(entry.key)
            finally:
                await watcher.stop()  # type: ignore[no-untyped-call]  # nats-py leaves it untyped
        return keys
