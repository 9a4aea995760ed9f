"""Attack: a principal holding only the operator's credentials tries to write.

The operator reads every stream, bucket and consumer and follows every Parley subject live
(tools/natsconf/_operator.py). With its credentials alone, under the least-privilege config,
it tries to submit as someone, deliver past the gate, delete or purge a stream, a message or
a key, put a key, and create a consumer: a durable, one on a work queue that would take
messages from their receiver, and the nats CLI's own ephemeral ordered push consumer aimed
at an agent's deliveries. Every attempt is refused, and every stream, consumer and key is as
it was.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import APIError
from prometheus_client import CollectorRegistry

from bus import ActorMetrics
from schemas import encode
from tests.support.lockdown import LockedDown, violations
from tests.support.wire import human
from tools.natsconf import IMPORTED_JS_API, OPERATOR

_REFUSED = (TimeoutError, NatsTimeoutError, NoRespondersError)


async def _state(admin: NATS, router: NATS, locked: LockedDown) -> dict[str, object]:
    """What the attacks must leave alone: messages and consumers of the streams attacked,
    and the keys."""
    ns, js = locked.ns, admin.jetstream()
    state: dict[str, object] = {}
    for family in ("submit", "deliver", "events"):
        stream = ns.stream(family)
        info = await js.stream_info(stream)
        state[stream] = (info.state.messages, info.state.last_seq, info.state.consumer_count)
        state[f"{stream} consumers"] = sorted(c.name for c in await js.consumers_info(stream))
    sessions = await router.jetstream().key_value(ns.bucket("sessions"))  # the router's reads
    state["session"] = (await sessions.get("session.s1")).value
    return state


async def test_the_operators_credentials_write_nothing(locked_down: LockedDown) -> None:
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    registry = CollectorRegistry()
    operator = await locked.connect(OPERATOR, ActorMetrics(registry, OPERATOR))
    cli, router, admin = [await locked.connect(a) for a in ("cli", "router", "provisioner")]
    submit, deliver, events = (ns.stream(f) for f in ("submit", "deliver", "events"))
    try:
        await locked.js(cli, "cli").publish(ns.submit("cli"), encode(human("waiting")))
        await router.jetstream().publish(ns.events("cli", "s1"), b'{"event":1}')
        sessions = await router.jetstream().key_value(ns.bucket("sessions"))
        await sessions.put("session.s1", b'{"state":"open"}')
        before = await _state(admin, router, locked)

        forged = encode(human("as cli"))
        for subject in (ns.submit("cli"), ns.submit("gate"), ns.deliver("gpt"), ns.audit("d", "p")):
            await operator.publish(subject, forged)
        # Its account's JetStream API; a refused request is never answered: wait 1 s, not 5.
        js = operator.jetstream(prefix=IMPORTED_JS_API, timeout=1)
        kv = await js.key_value(ns.bucket("sessions"))  # opening it is a read it may make
        refused: list[Coroutine[Any, Any, object]] = [
            js.publish(ns.submit("cli"), forged, timeout=1),
            js.delete_stream(submit),
            js.purge_stream(events),
            js.delete_msg(events, 1),
            js.delete_consumer(deliver, "gpt"),
            kv.put("session.s1", b'{"state":"forged"}'),
            kv.delete("session.s1"),
            kv.purge("session.s1"),
            js.add_consumer(events, ConsumerConfig(durable_name="mine")),  # a durable
            js.add_consumer(events, ConsumerConfig(name="mine", durable_name="mine")),
            js.add_consumer(  # an ephemeral that takes cli's submission from the gate
                submit,
                ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, filter_subject=ns.submit("cli")),
            ),
            js.add_consumer(  # the nats CLI's ordered consumer, pushing onto gpt's deliveries
                events,
                ConsumerConfig(
                    name="ordered",
                    ack_policy=AckPolicy.NONE,
                    deliver_policy=DeliverPolicy.ALL,
                    deliver_subject=ns.deliver("gpt"),
                    filter_subject=ns.events("cli", "s1"),
                    flow_control=True,
                    idle_heartbeat=5.0,
                    mem_storage=True,
                    num_replicas=1,
                ),
            ),
        ]
        outcomes = await asyncio.gather(*refused, return_exceptions=True)
        assert all(isinstance(o, _REFUSED) for o in outcomes), outcomes
        # Through the core account's own API prefix there is nothing in its account at all.
        plain = operator.jetstream(timeout=1)
        assert isinstance(
            (await asyncio.gather(plain.delete_stream(submit), return_exceptions=True))[0],
            (*_REFUSED, APIError),
        )
        await operator.flush()
        await js.stream_info(submit)  # answered after everything above was handled
        assert violations(registry, OPERATOR) == 4 + len(refused) + 1
        assert await _state(admin, router, locked) == before
    finally:
        for nc in (operator, cli, router, admin):
            await nc.close()
