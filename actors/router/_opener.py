"""Opening a session against the store: a person's message stored as a new session, or its
opening replayed when the message comes again.

A first delivery of an opening is nearly always a new session, so it is created at once,
create-only, without reading first: an id already in use fails the create and is then read
(the same message opened it: its effects are replayed; another did: refused as a duplicate).
Reading first cost every opening a round trip in a row before its create. A redelivery reads
first, since the first attempt may have stored the session already.

The trace's link (an error in the trace finds its session through it) is written only once
the session is created, so a message refused as a duplicate never links its trace to a session
it does not own; it goes out with the opening's effects, through the input's outbox, and is
stored before the input is acked as they are. An error can reach the router in that trace only
after the gate decided the call those effects publish, long after.
"""

from __future__ import annotations

from actors.router._opening import open_session, refuse_duplicate
from actors.router._session import Limits, Session, Step
from actors.router._store import SessionStore
from bus import Context
from schemas import HumanMessage, utc_now, valid_token

__all__ = ("open_or_replay",)

_CREATE_ATTEMPTS = 5


async def open_or_replay(
    store: SessionStore[Session],
    msg: HumanMessage,
    session_id: str,
    ctx: Context,
    limits: Limits,
) -> Step:
    """The step of an opening message: a new session, a replay, or a refusal."""
    now = utc_now()
    read_first = ctx.attempt > 1  # a redelivery: the first attempt may have stored it
    for _ in range(_CREATE_ATTEMPTS):
        if read_first and valid_token(session_id):
            stored = await store.load(session_id, fresh=True)
            if stored is not None:
                replay = stored.session.effects_of(msg.id)
                if replay is not None:
                    # The first attempt may have stored the session but not its trace's
                    # link (written after it): linked again before replaying.
                    await store.link_trace(ctx.trace_id, session_id)
                    return Step(session=stored.session, effects=replay, note="replayed")
                if stored.session.origin_id == msg.id:
                    return Step(session=stored.session, note="opening message seen long ago")
                return refuse_duplicate(msg, session_id=session_id, sender=ctx.sender, now=now)
        step = open_session(msg, session_id=session_id, sender=ctx.sender, now=now, limits=limits)
        if step.session is None:
            return step
        if await store.create_linked(step.session, ctx.trace_id, ctx.outbox):
            return step
        read_first = True  # the id is in use: by this message's earlier attempt, or another's
    raise RuntimeError(f"session {session_id} kept changing while being opened")
