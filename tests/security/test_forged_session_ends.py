"""Only the router can end a session for the tool runtime.

The tool runtime lets go of what a session held for its person when the router stores the
session's end on `parley.standing.<owner>.<session>` (actors/tools/_held_steps.py
`on_session_end`): every held request of that session is answered `SESSION_EXPIRED`, and an
approval given afterwards runs nothing. Whoever could publish there could cancel another
person's held steps; whoever could take the runtime's durable could keep it from hearing of
ends. Under the least-privilege config of `parley nats-config`, provisioned as `parley
provision` does, every other principal is refused both by the broker.
"""

from __future__ import annotations

import pytest
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import ConsumerConfig
from nats.js.errors import APIError
from prometheus_client import CollectorRegistry

from bus import ActorMetrics
from schemas import SessionEvent, encode, new_id, utc_now
from tests.support.lockdown import LockedDown, violations

FORGERS = ("gpt", "claude", "cli", "gate", "auditor", "tools", "llm")
NO_WAIT = b'{"batch": 1, "no_wait": true}'
"""A pull the server answers at once (no message: status 404), to whoever may pull."""


def _ended(session: str) -> bytes:
    return encode(
        SessionEvent(
            id=new_id(),
            created_at=utc_now(),
            session_id=session,
            event_type="session_canceled",
            stop_reason="forged",
        )
    )


async def test_no_principal_but_the_router_stores_a_sessions_end(
    locked_down: LockedDown,
) -> None:
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    session = new_id()
    for who in FORGERS:
        registry = CollectorRegistry()
        nc = await locked.connect(who, ActorMetrics(registry, who))
        try:
            with pytest.raises((NatsTimeoutError, TimeoutError)):
                await locked.js(nc, who).publish(
                    ns.standing("cli", session), _ended(session), timeout=1
                )
            await nc.flush()
            await nc.flush()  # the server's answer to the publish has come (one is no barrier)
            assert violations(registry, who) == 1, who  # refused, not merely slow
        finally:
            await nc.close()
    router = await locked.connect("router")
    try:  # the router's own end is stored: the refusals above are not a broken subject
        ack = await locked.js(router, "router").publish(
            ns.standing("cli", session), _ended(session)
        )
        assert ack.stream == ns.stream("events")
    finally:
        await router.close()


async def test_no_principal_takes_or_makes_the_runtimes_durable_on_session_ends(
    locked_down: LockedDown,
) -> None:
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    events = ns.stream("events")
    for who in ("gpt", "cli", "router", "gate"):
        registry = CollectorRegistry()
        nc = await locked.connect(who, ActorMetrics(registry, who))
        try:
            js = locked.js(nc, who)
            api = locked.settings(who).js_api_prefix
            with pytest.raises((NatsTimeoutError, TimeoutError, NoRespondersError)):
                await nc.request(f"{api}.CONSUMER.MSG.NEXT.{events}.tools", NO_WAIT, timeout=1)
            config = ConsumerConfig(durable_name="tools", filter_subject=ns.wildcard("standing"))
            with pytest.raises((NatsTimeoutError, TimeoutError, APIError)):
                await js.add_consumer(events, config, timeout=1)
            await nc.flush()
            await nc.flush()
            assert violations(registry, who) == 2, who  # both refused, not merely slow
        finally:
            await nc.close()
    tools = await locked.connect("tools")
    try:  # the runtime itself is answered: the refusals above are not a missing durable
        api = locked.settings("tools").js_api_prefix
        await tools.request(f"{api}.CONSUMER.MSG.NEXT.{events}.tools", NO_WAIT, timeout=5)
    finally:
        await tools.close()
