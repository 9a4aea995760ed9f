"""A collaboration survives losing the JetStream metadata leader and the leader of
`PARLEY_SUBMIT` on a 3-node cluster.

Gate, router and two scripted agents run as real processes against the cluster's URL list;
every stream is replicated three times. After the first round the gate is paused (SIGSTOP),
so the session's next submissions wait in `PARLEY_SUBMIT` while the cluster loses, one after
the other, the node that leads the metadata group and the node that leads `PARLEY_SUBMIT`
(each SIGKILLed, a new leader awaited from the nodes' logs and confirmed through the API, the
node restarted before the next kill: three nodes survive one loss at a time). The gate then
resumes and the session must end at its cap with every round spoken once, word for word.
"""

from __future__ import annotations

import asyncio
import json
import signal
import urllib.request
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from bus import EmbeddedCluster, TraceHeaders, provision
from schemas import Namespace, SessionEvent, encode
from tests.support.processes import REPO, parley_env
from tests.support.router_wire import END_EVENTS, Timeline, collaborate, stored_session
from tests.support.system import System
from tools.demo import publish_policy

ROUNDS = 4
GOAL = "Write a short essay, one section per round."
LEADER_WAIT_S = 30.0


def _meta_leader(cluster: EmbeddedCluster, asked: str) -> str:
    """The metadata leader as node `asked` reports it on its monitoring port (`/jsz`)."""
    url = f"{cluster.node(asked).monitor_url}/jsz"
    with urllib.request.urlopen(url, timeout=5) as response:
        leader = json.load(response)["meta_cluster"]["leader"]
    assert isinstance(leader, str)
    return leader


async def _submit_leader(nc: NATS, ns: Namespace, cluster: EmbeddedCluster) -> str:
    """The node leading `PARLEY_SUBMIT`, from `$JS.API.STREAM.INFO`, once one does (the
    previous kill may have left it electing one)."""
    logged = await asyncio.to_thread(cluster.wait_stream_leader, ns.stream("submit"))
    info = await nc.jetstream().stream_info(ns.stream("submit"))
    assert info.cluster is not None and info.cluster.leader == logged
    return logged


async def _kill_and_replace(cluster: EmbeddedCluster, node: str, stream: str | None) -> str:
    """SIGKILL `node`, wait for the leader it held (the metadata group's, or `stream`'s) to be
    elected elsewhere, then restart it and wait for it to rejoin; return the new leader."""
    cluster.kill(node)
    if stream is None:
        leader = await asyncio.to_thread(cluster.wait_meta_leader, LEADER_WAIT_S, not_on=node)
    else:
        leader = await asyncio.to_thread(
            cluster.wait_stream_leader, stream, LEADER_WAIT_S, not_on=node
        )
    assert leader != node
    await asyncio.to_thread(cluster.restart, node, LEADER_WAIT_S)
    return leader


async def _events_until_end(
    js: JetStreamContext, ns: Namespace, session_id: str
) -> tuple[list[SessionEvent], list[tuple[str, int | None]]]:
    """Every event of the session, read afresh from the stream (a consumer made before the
    kills may have lived on a killed node), up to its end; and what was stored after the end
    (none is expected: an event there was stored out of order, which a reader that stops at
    the end, as `parley collab --follow` does, never sees)."""
    timeline = Timeline(js, ns, session_id)
    await timeline.open()
    try:
        await timeline.until_end(timeout=40)
        ended = len(timeline.events)
        await timeline.rest()
    finally:
        await timeline.close()
    after: list[tuple[str, int | None]] = [(e.event_type, e.round) for e in timeline.events[ended:]]
    return timeline.events[:ended], after


@pytest.mark.chaos
@pytest.mark.timeout(120)
async def test_a_collaboration_survives_losing_the_meta_and_submit_leaders(
    cluster: EmbeddedCluster, namespace: Namespace, tmp_path: Path
) -> None:
    nc = await nats.connect(cluster.url.split(","), max_reconnect_attempts=-1)
    system = System(parley_env(cluster.url, namespace.root, ack_wait_s="2"))
    try:
        js = nc.jetstream()
        assert await provision(js, namespace) == 3
        public = await publish_policy(js, namespace, REPO / "deploy/policy/demo.toml", tmp_path)
        gate_options = json.dumps({"policy_keys": [str(public)], "tenant": "demo"})
        await system.start("gate", "gate", {**system.env, "PARLEY_OPTIONS": gate_options})
        await system.start("router", "router", system.env)
        for agent in ("gpt", "claude"):
            await system.start(agent, "agent", system.env, "--profile", agent)

        msg = collaborate(GOAL, max_rounds=ROUNDS, first="gpt")
        assert msg.session_id is not None
        first_round = Timeline(js, namespace, msg.session_id)
        await first_round.open()
        headers = TraceHeaders(trace_id=msg.id, origin="cli").to_headers(msg.id)
        await js.publish(namespace.submit("cli"), encode(msg), headers=headers)
        while not any(event.event_type == "step_completed" for event in first_round.events):
            await first_round.next(timeout=30)
        system.processes["gate"].signal(signal.SIGSTOP)  # what follows waits in PARLEY_SUBMIT
        await first_round.close()

        meta = _meta_leader(cluster, cluster.names[0])
        assert meta == cluster.meta_leader()
        new_meta = await _kill_and_replace(cluster, meta, None)
        assert _meta_leader(cluster, meta) == new_meta  # the restarted node follows it too

        submit = await _submit_leader(nc, namespace, cluster)
        new_submit = await _kill_and_replace(cluster, submit, namespace.stream("submit"))
        assert await _submit_leader(nc, namespace, cluster) == new_submit

        system.processes["gate"].signal(signal.SIGCONT)
        events, after_the_end = await _events_until_end(js, namespace, msg.session_id)
        last = events[-1]
        assert last.event_type in END_EVENTS
        assert (last.event_type, last.stop_reason) == ("session_completed", "cap_reached"), events
        rounds = [event.round for event in events if event.event_type == "step_completed"]
        told = [(event.event_type, event.round, event.id) for event in events]
        # A gap names what was read around it, and what was stored after the end.
        assert rounds == list(range(1, ROUNDS + 1)), (told, after_the_end)
        assert after_the_end == [], after_the_end
        session = await stored_session(js, namespace, msg.session_id)
        said = [item.text for item in session.transcript if item.role in ("gpt", "claude")]
        assert said == [
            f'{("gpt", "claude")[(r - 1) % 2]}: round {r} of {ROUNDS} on "{GOAL}".'
            for r in range(1, ROUNDS + 1)
        ]
    finally:
        if "gate" in system.processes:  # a paused process cannot be stopped gracefully
            system.processes["gate"].signal(signal.SIGCONT)
        system.close()
        await nc.close()
