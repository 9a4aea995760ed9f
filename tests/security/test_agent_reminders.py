"""An agent's reminders fill its own stream, never the one the router and tool runtime share.

An attack review, holding an agent's credentials, published 1 MiB reminders on the agent's own
`parley.timers.<agent>` until `PARLEY_TIMERS` (64 MiB, shared) was full, and took none of them:
the router's reminders about its calls were refused (`maximum bytes exceeded`), and its
inputs were dead-lettered though their sessions had answered. The per-sender bound (10,000
messages) was no bound on bytes. Now each agent's reminders are in a stream of its own
(`Namespace.agent_stream("timers", agent)`, on `parley.timers.<agent>.own`), bounded by the
quotas' `stream_bytes.agent_timers`, and an agent may not publish on the shared stream at all.

Under the least-privilege config of `parley nats-config` on a real nats-server, provisioned
as `parley provision` does; the attacker is a raw nats-py client holding gpt's credentials.
"""

from __future__ import annotations

import nats
import pytest
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import ConsumerConfig
from nats.js.errors import APIError

from bus import MSG_ID, EmbeddedServer, provision
from bus._quotas import MIB
from schemas import Namespace
from tests.support.lockdown import LockedDown


async def test_an_agent_flooding_its_reminders_fills_only_its_own_stream(
    locked_down: LockedDown,
) -> None:
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    gpt = await locked.connect("gpt")
    router = await locked.connect("router")
    try:
        js = locked.js(gpt, "gpt")
        flood = b"r" * (gpt.max_payload - 4096)
        stored = 0
        with pytest.raises(APIError) as full:
            for _ in range(64):
                await js.publish(ns.agent_timers("gpt"), flood)
                stored += 1
        assert "maximum bytes" in str(full.value).lower(), full.value
        assert stored * len(flood) <= 8 * MIB  # the quotas' default `agent_timers`

        # The shared stream is not the agent's to write: the server refuses the publish.
        with pytest.raises((NatsTimeoutError, TimeoutError)):
            await locked.js(gpt, "gpt").publish(ns.timers("gpt"), b"reminder", timeout=1)

        # The router's reminders go on as ever, and nothing of the flood is in their stream.
        ack = await locked.js(router, "router").publish(ns.timers("router"), b"a call to watch")
        assert ack.stream == ns.stream("timers")
    finally:
        await gpt.close()
        await router.close()
    admin = await locked.connect("provisioner")
    try:
        shared = await admin.jetstream().stream_info(ns.stream("timers"))
        assert shared.state.messages == 1 and shared.state.bytes < MIB, shared.state
    finally:
        await admin.close()


async def test_an_upgrade_moves_an_agents_earlier_reminders_into_its_own_stream(
    nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    """A deployment of the release before: gpt's reminders in `PARLEY_TIMERS`, read through
    its durable there. Provisioning moves each into gpt's own stream, headers kept (a
    delegation in flight at the upgrade still times out), leaves the router's, and deletes
    the old durable; a second run finds nothing more to move. (On an open broker: a locked-down
    one's accounts would keep the earlier streams from the test's staging; the provisioner's
    grants for it are tests/unit/test_nats_permissions.py's.)"""
    ns = namespace
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        await provision(js, ns)
        durable = ConsumerConfig(durable_name="gpt", filter_subject=ns.timers("gpt"))
        await js.add_consumer(ns.stream("timers"), durable)
        for n in range(3):
            await js.publish(ns.timers("gpt"), f"deadline {n}".encode(), headers={MSG_ID: f"r{n}"})
        await js.publish(ns.timers("router"), b"the router's own", headers={MSG_ID: "router-1"})
        for _ in range(2):
            await provision(js, ns, agents=["gpt"])
        own = ns.agent_stream("timers", "gpt")
        moved = [await js.get_msg(own, seq) for seq in (1, 2, 3)]
        assert [m.data for m in moved] == [b"deadline 0", b"deadline 1", b"deadline 2"]
        assert [(m.headers or {}).get(MSG_ID) for m in moved] == ["r0", "r1", "r2"]
        assert (await js.stream_info(own)).state.messages == 3  # moved once, run twice
        shared = await js.stream_info(ns.stream("timers"), subjects_filter=">")
        assert shared.state.subjects == {ns.timers("router"): 1}  # the router's stays
        names = [info.name for info in await js.consumers_info(ns.stream("timers"))]
        assert "gpt" not in names, names
    finally:
        await nc.close()
