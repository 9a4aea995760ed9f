"""The A2A edge's own credentials can do no more than its role: it reads the policy bundle
and beats, and acts for a client only with that client's own credentials.

Holding only the edge's nkey (`a2a`), an attacker who took over the process cannot submit as
a client (`parley.submit.person-alice`) or as itself, follow a client's timelines, write the
policy bundle, or create a consumer on the policy bucket (whose creator chooses where the
server pushes what it reads). The server refuses each, and says so to the connection.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from bus import ActorMetrics, EmbeddedServer
from schemas import Namespace
from tests.support.lockdown import LockedDown, violations
from tools.natsconf import DEFAULT_ACTORS, IMPORTED_JS_API, write_nats_config

ALICE = "person-alice"


@pytest.fixture
def locked(tmp_path: Path, namespace: Namespace) -> Iterator[LockedDown]:
    config_dir = tmp_path / "nats-config"
    write_nats_config(config_dir, [*DEFAULT_ACTORS, "a2a", ALICE], namespace)
    server = EmbeddedServer(tmp_path / "nats", authorization=config_dir / "authorization.conf")
    server.start()
    yield LockedDown(server, config_dir, namespace)
    server.close()


async def test_the_edge_cannot_act_as_a_client_or_write(locked: LockedDown) -> None:
    ns = locked.ns
    registry = CollectorRegistry()
    edge = await locked.connect("a2a", ActorMetrics(registry, "a2a"))
    try:
        policy = ns.bucket("policy")
        refused_publishes = (
            ns.submit(ALICE),  # as a client: only the client's own credentials may
            ns.submit("a2a"),  # as itself: it submits nothing in its own name
            f"$KV.{policy}.bundle",  # the bundle is the signer's to write
            f"{IMPORTED_JS_API}.CONSUMER.CREATE.KV_{policy}",  # no consumer, no watch
        )
        for subject in refused_publishes:
            await edge.publish(subject, b"{}")
            await edge.flush()
        await edge.subscribe(ns.timelines(ALICE))  # a client's sessions are the client's
        await edge.flush()
        assert violations(registry, "a2a") == len(refused_publishes) + 1
    finally:
        await edge.close()
