"""An agent's reminders from before each agent had a stream of its own, moved into it.

An earlier release kept every agent's reminders (the deadlines of the agents it called) in the
shared `PARLEY_TIMERS`, on `parley.timers.<agent>`, read through a durable named after the
agent. Now they live in `PARLEY_TIMERS_<agent>` on `parley.timers.<agent>.own`
(bus/_stream_configs.py), and the agent host reads only that. Left where they were, the
reminders of delegations in flight at the upgrade would never be read, so their calls would
never time out, and the old durable would linger in every consumer count. So provisioning,
right after it makes an agent's own stream, moves each such reminder there (its headers kept)
before deleting it from the shared stream, and deletes the old durable. A reminder is
redelivered whenever its deadline is looked at, so one moved late is still on time or past
due, never lost. A move cut short between its publish and its delete is repeated by the next
provisioning: within the stream's duplicate window (2 minutes) its `Nats-Msg-Id` makes the copy
a duplicate the stream drops, later the agent gets the reminder twice, which it handles as
one (its wait is read again, and a deadline already applied applies nothing). An agent's own
stream too full for them leaves the rest where they are, said in the log.
"""

from __future__ import annotations

import functools
import logging

from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError

from bus._elections import through_elections_if_clustered
from schemas import Namespace

__all__ = ("move_earlier_reminders",)

log = logging.getLogger("parley.bus.provision")

_EXPECTATIONS = "Nats-Expected-"
"""Headers that state what the stream held when it was first stored: not true of the new one."""


async def move_earlier_reminders(js: JetStreamContext, ns: Namespace, agent: str) -> int:
    """Move `agent`'s reminders left in `PARLEY_TIMERS` into its own stream and delete its
    durable there; how many were moved."""
    shared, earlier, own = ns.stream("timers"), ns.timers(agent), ns.agent_timers(agent)
    try:
        await through_elections_if_clustered(
            js, lambda: js.delete_consumer(shared, agent), f"{agent}'s durable on {shared}"
        )
    except NotFoundError:
        pass
    moved = 0
    while True:
        try:
            reminder = await through_elections_if_clustered(
                js,
                lambda: js.get_msg(shared, seq=1, subject=earlier, next=True),
                f"{agent}'s reminders on {shared}",
            )
        except NotFoundError:
            break
        headers = {
            name: value
            for name, value in (reminder.headers or {}).items()
            if not name.startswith(_EXPECTATIONS)
        }
        try:
            await through_elections_if_clustered(
                js,
                functools.partial(js.publish, own, reminder.data or b"", headers=headers or None),
                f"{agent}'s reminder into its own stream",
            )
        except APIError as exc:  # its own stream is full: the rest stay, said, not fatal
            log.warning(
                "an agent's earlier reminders do not fit its own stream: left in the shared one",
                extra={"agent": agent, "moved": moved, "error": str(exc)},
            )
            return moved
        try:
            await through_elections_if_clustered(
                js,
                functools.partial(js.delete_msg, shared, reminder.seq or 0),
                f"a moved reminder on {shared}",
            )
        except NotFoundError:
            pass  # another provisioning run moved it at once: its copy was a duplicate
        moved += 1
    if moved:
        log.info(
            "moved an agent's reminders into its own stream",
            extra={"agent": agent, "reminders": moved, "to": ns.agent_stream("timers", agent)},
        )
    return moved
