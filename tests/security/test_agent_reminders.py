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

import pytest
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import APIError

from bus._quotas import MIB
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
