"""An actor outlives a broker outage longer than nats-py's default reconnect budget.

nats-py gives up after 60 reconnect attempts 2 s apart (about two minutes) and closes the
connection for good; an actor that kept that default would sit alive but deaf after a long
outage. Actors reconnect for ever (bus/_connection.py), so after the server comes back on the
same port and store, the same process answers again, and what was stored before is kept.
"""

from __future__ import annotations

import asyncio

import nats
import nats.aio.client
import pytest

from bus import EmbeddedServer, provision
from schemas import AgentCall, Namespace, encode, new_id, utc_now
from tests.support.processes import READY, parley_env, start_actor
from tests.support.wire import Effects, deliver

pytestmark = pytest.mark.chaos

DEFAULT_BUDGET_S = (
    nats.aio.client.DEFAULT_MAX_RECONNECT_ATTEMPTS * nats.aio.client.DEFAULT_RECONNECT_TIME_WAIT
)


def _call(text: str) -> AgentCall:
    return AgentCall(
        id=new_id(), created_at=utc_now(), target="echo", call_id=new_id(), goal="g", text=text
    )


async def _ask(server: EmbeddedServer, ns: Namespace, text: str) -> str:
    """Deliver a call to echo on a fresh connection and return the text it answers with."""
    client = await nats.connect(server.url)
    try:
        js = client.jetstream()
        answers = Effects(js, ns, "echo")
        await answers.open()
        call = _call(text)
        await deliver(js, ns, "echo", encode(call), call.id)
        _, answer = await answers.next(timeout=60)
        return answer.text
    finally:
        await client.close()


@pytest.mark.timeout(DEFAULT_BUDGET_S + 120)
async def test_an_actor_survives_an_outage_longer_than_the_default_reconnect_budget(
    private_server: EmbeddedServer,
) -> None:
    ns = Namespace("outage")
    client = await nats.connect(private_server.url)
    await provision(client.jetstream(), ns)
    await client.close()
    echo = start_actor("echo", "echo", parley_env(private_server.url, ns.root, ack_wait_s="5"))
    try:
        await echo.wait_line(READY)
        assert await _ask(private_server, ns, "before") == "before"
        lines_before = len(echo.lines)
        private_server.kill()
        await echo.wait_line("disconnected|nats error", start=lines_before, timeout=30)
        # The outage itself: held for longer than nats-py's own budget on purpose.
        await asyncio.sleep(DEFAULT_BUDGET_S + 5)
        assert echo.process.poll() is None, "the actor died during the outage"
        private_server.start()
        assert await _ask(private_server, ns, "after") == "after"
        assert echo.process.poll() is None
    finally:
        echo.close()
