"""Opening a session against the store: a person's message stored as a new session, or its
opening replayed when the message comes again.

A first delivery of an opening is nearly always a new session, so it is created at once,
create-only, without reading first: an id already in use fails the create and is then read
(the same message opened it: its effects are replayed; another did: refused as a duplicate).
Reading first cost every opening a round trip in a row before its create. A redelivery reads
first, since the first attempt may have stored the session already, and so does a message
that cannot open a session: refused, it must not end the session already using its id.

The trace's link (an error in the trace finds its session through it) is created in the same
round as the session, create-only too (`SessionStore.create_linked`), so a duplicate never
points a trace already linked elsewhere at a session it does not own, and both are stored
before any effect goes out.
"""

from __future__ import annotations

from actors.router._opening import open_session, refuse_duplicate, refuse_full
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
                    # link: linked again before replaying, while it is open (an ended
                    # session's link was written to expire with it: left so).
                    if stored.session.open:
                        await store.link_trace(ctx.trace_id, session_id)
                    return Step(session=stored.session, effects=replay, note="replayed")
                if stored.session.origin_id == msg.id:
                    return Step(session=stored.session, note="opening message seen long ago")
                return refuse_duplicate(msg, session_id=session_id, sender=ctx.sender, now=now)
        step = open_session(msg, session_id=session_id, sender=ctx.sender, now=now, limits=limits)
        if step.session is None:
            if read_first or not valid_token(session_id):
                return step
            read_first = True  # refused: unless its id is in use, then as a duplicate
            continue
        full = await store.charges.refusal(ctx.sender) if store.charges else None
        if full is not None:
            if not read_first:  # refused: unless its id is in use (a refusal ends nothing)
                read_first = True
                continue
            return refuse_full(msg, session_id=session_id, sender=ctx.sender, now=now, why=full)
        if await store.create_linked(step.session, ctx.trace_id):
            return step
        read_first = True  # the id is in use: by this message's earlier attempt, or another's
    raise RuntimeError(f"session {session_id} kept changing while being opened")
