"""The relay under least privilege: Alice's deployment locked down as `parley nats-config`
writes it (the relay a principal of its own, serving `bob-byte-doc`), and the call still
goes through, with no permission the server refused to anyone. The relay's durable is the
provisioner's work (`parley provision` reads the names the config granted the relay)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from bus import MSG_ID, EmbeddedServer
from schemas import AgentResponse, Namespace, decode_envelope, encode
from tests.support.lockdown import LockedDown
from tests.support.processes import ProcessOutput
from tests.support.relay import byte_doc_call, start_two_deployments
from tools.natsconf import write_nats_config

pytestmark = pytest.mark.chaos


async def test_a_locked_down_relay_forwards_and_answers_within_its_grants(tmp_path: Path) -> None:
    ns = Namespace(f"t{uuid.uuid4().hex[:12]}")
    config_dir = tmp_path / "alice-broker"
    write_nats_config(config_dir, ["gate", "router", "relay"], ns, relay_serves=["bob-byte-doc"])
    log: list[str] = []
    servers = [
        EmbeddedServer(
            tmp_path / "alice-nats",
            authorization=config_dir / "authorization.conf",
            on_log=log.append,
        ),
        EmbeddedServer(tmp_path / "bob-nats"),
        EmbeddedServer(tmp_path / "gateway-nats"),
    ]
    for server in servers:
        server.start()
    processes: list[ProcessOutput] = []
    try:
        locked = LockedDown(servers[0], config_dir, ns)
        locked.tune("relay", ack_wait_s="2.0")  # as the relay runs (tests/support/relay.py)
        # `parley provision` creates the shared agent's durable, for the name the config
        # granted the relay (its manifest), as for any receiver: the relay only binds it.
        provisioned = await locked.provision()
        assert f"{ns.stream('deliver')}/bob-byte-doc" in provisioned
        system = await start_two_deployments(
            servers[0], servers[1], servers[2], tmp_path / "d", processes, alice_locked=locked
        )
        try:
            router = await locked.connect("router")
            js = locked.js(router, "router")
            inbox = await js.pull_subscribe_bind(durable="router", stream=ns.stream("deliver"))
            call = byte_doc_call("review it, locked down")
            await js.publish(ns.submit("router"), encode(call), headers={MSG_ID: call.id})
            (msg,) = await inbox.fetch(1, timeout=30)
            await msg.ack_sync()
            answer = decode_envelope(msg.data)
            assert isinstance(answer, AgentResponse) and answer.sender == "bob-byte-doc"
            await router.close()
        finally:
            await system.close()
    finally:
        for process in processes:
            process.close()
        for server in servers:
            server.close()
    refused = [line for line in log if re.search(r"(Publish|Subscription) Violation", line)]
    assert refused == []
