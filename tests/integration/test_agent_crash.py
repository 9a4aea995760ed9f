"""An agent host SIGKILLed after its reply is stored and before it acks answers exactly once."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from bus import MSG_ID, EmbeddedServer
from schemas import AgentResponse, Namespace
from tests.support.agent_probe import HOLD
from tests.support.agents import Submitted, agent_call, send, write_profile
from tests.support.processes import READY, ProcessOutput, parley_env

SCRIPT = """
[[turn]]
message = "answer to {goal}"
final = true
"""


def start_holding_host(profile: str, env: dict[str, str]) -> ProcessOutput:
    """The host holds a `[hold]` call's first delivery once its reply is stored, until killed."""
    argv = [sys.executable, "-m", "tools", "run", "support.agent_probe:HoldingHost"]
    return ProcessOutput([*argv, "--profile", profile], env, name="keeper")


@pytest.fixture
def processes() -> Iterator[list[ProcessOutput]]:
    started: list[ProcessOutput] = []
    yield started
    for process in started:
        process.close()


@pytest.mark.chaos
async def test_sigkill_after_reply_before_ack_yields_exactly_one_reply(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    processes: list[ProcessOutput],
    tmp_path: Path,
) -> None:
    js = nc.jetstream()
    # The ack wait is long enough that the host's in-progress heartbeats keep a held call
    # from being redelivered while it lives: the redelivery must come from the restart.
    env = parley_env(nats_server.url, namespace.root, ack_wait_s="1.5", fetch_timeout_s="1")
    profile = str(
        write_profile(
            tmp_path, "keeper", 'backend = "scripted"\nscript = "keeper-script.toml"', script=SCRIPT
        )
    )
    out = await Submitted(js, namespace, "keeper").open()
    host = start_holding_host(profile, env)
    processes.append(host)
    await host.wait_line(READY)
    for round_no in range(2):
        call = agent_call("keeper", f"{HOLD} call {round_no}")
        await send(js, namespace, "keeper", call)
        await host.wait_line(r"holding the call after its reply was stored")
        headers, reply = await out.next()
        assert isinstance(reply, AgentResponse)
        assert (reply.call_id, reply.attempt, reply.text) == (
            call.call_id,
            1,
            f"answer to {HOLD} call {round_no}",
        )
        assert headers[MSG_ID] == reply.id
        assert host.kill() == -signal.SIGKILL
        host = start_holding_host(profile, env)
        processes.append(host)
        # The restarted host is given the call again and answers it (attempt 2) with the same
        # id; JetStream drops that copy as a duplicate.
        await host.wait_line(rf'"msg":"answered".*"call_id":"{call.call_id}".*"attempt":2')
        # Nothing but the next call's reply may follow: a second reply to the killed call
        # would come first.
        probe = agent_call("keeper", f"{HOLD} after {round_no}")
        await send(js, namespace, "keeper", probe)
        await host.wait_line(r"holding the call after its reply was stored", start=0)
        _, following = await out.next()
        assert isinstance(following, AgentResponse)
        assert following.call_id == probe.call_id, f"round {round_no}: a second reply {following}"
        assert host.kill() == -signal.SIGKILL
        host = start_holding_host(profile, env)
        processes.append(host)
        await host.wait_line(rf'"msg":"answered".*"call_id":"{probe.call_id}".*"attempt":2')
    assert await out.none_left(timeout=1.0)
