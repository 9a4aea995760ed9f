"""An actor outlives a broker outage longer than nats-py's default reconnect budget.

nats-py gives up after 60 reconnect attempts (2 s apart by default) and closes the connection
for good; an actor that kept that limit would sit alive but deaf after a long outage. Actors
reconnect for ever (bus/_connection.py), so after the server comes back on the same port and
store, the same process answers again, and what was stored before is kept. The limit counts
attempts, and an actor pauses `RECONNECT_WAIT_S` between them: an outage of 60 of those
pauses and 10 s more outlasts it (40 s, not the two minutes of nats-py's own pause).

It runs under the least-privilege config: the actor (an echo, as agent `gpt`) connects as its
own nkey user and must authenticate again after the outage; the test plays the gate with the
gate's credentials (delivering, and reading submissions through the gate's own durable).
"""

from __future__ import annotations

import asyncio

import nats
import nats.aio.client
import pytest

from bus._connection import RECONNECT_WAIT_S
from schemas import AgentCall, AgentResponse, decode_envelope, encode, new_id, utc_now
from tests.support.lockdown import LockedDown
from tests.support.processes import READY, parley_env, start_actor
from tests.support.wire import deliver

pytestmark = pytest.mark.chaos

AGENT = "gpt"

OUTAGE_S = nats.aio.client.DEFAULT_MAX_RECONNECT_ATTEMPTS * RECONNECT_WAIT_S + 10


def _call(text: str) -> AgentCall:
    return AgentCall(
        id=new_id(), created_at=utc_now(), target=AGENT, call_id=new_id(), goal="g", text=text
    )


async def _ask(locked: LockedDown, text: str) -> str:
    """As the gate, on a fresh connection: deliver a call to the agent, return its answer."""
    ns = locked.ns
    client = await locked.connect("gate")
    try:
        js = client.jetstream()
        submitted = await locked.gate_submissions(js)
        call = _call(text)
        await deliver(js, ns, AGENT, encode(call), call.id)
        while True:
            (msg,) = await submitted.fetch(1, timeout=60)
            await msg.ack_sync()
            answer = decode_envelope(msg.data)
            assert isinstance(answer, AgentResponse) and msg.subject == ns.submit(AGENT)
            # A server SIGKILLed may forget an ack it had not yet written: the answer before
            # the outage can come again, and is not this call's.
            if answer.call_id == call.call_id:
                return answer.text
    finally:
        await client.close()


@pytest.mark.timeout(OUTAGE_S + 120)
async def test_an_actor_survives_an_outage_longer_than_the_default_reconnect_budget(
    locked_down: LockedDown,
) -> None:
    locked = locked_down
    await locked.provision()
    server = locked.server
    env = parley_env(server.url, locked.ns.root)
    echo = start_actor("echo", AGENT, env, "--config", str(locked.settings_file(AGENT)))
    try:
        await echo.wait_line(READY)
        assert await _ask(locked, "before") == "before"
        lines_before = len(echo.lines)
        server.kill()
        await echo.wait_line("disconnected|nats error", start=lines_before, timeout=30)
        # The outage itself: more reconnect attempts than nats-py's default allows, on purpose.
        await asyncio.sleep(OUTAGE_S)
        assert echo.process.poll() is None, "the actor died during the outage"
        server.start()
        try:
            assert await _ask(locked, "after") == "after"
        except TimeoutError:  # say what the actor went through (it failed once under load)
            pytest.fail(
                "no answer after the outage; the actor's log:\n" + "\n".join(echo.lines[-40:])
            )
        assert echo.process.poll() is None
        refused = [line for line in echo.lines if "permission" in line.lower()]
        assert not refused, refused
    finally:
        echo.close()
