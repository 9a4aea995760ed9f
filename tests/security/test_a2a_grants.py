"""The A2A edge's and the web console's own credentials can do no more than their role: each
reads the policy bundle and beats, and acts for a client or person only with that one's own
credentials.

Holding only the edge's nkey (`a2a`) or the console's (`console`), an attacker who took over
the process cannot submit as a client (`parley.submit.person-alice`) or as itself, follow a
person's timelines, write the policy bundle, or create a consumer on the policy bucket (whose
creator chooses where the server pushes what it reads). The server refuses each, and says so
to the connection; the bundle's stored message it may read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.js.errors import NotFoundError
from prometheus_client import CollectorRegistry

from bus import ActorMetrics, EmbeddedServer
from schemas import Namespace
from tests.support.lockdown import LockedDown, violations
from tools.natsconf import DEFAULT_ACTORS, IMPORTED_JS_API, write_nats_config

ALICE = "person-alice"


@pytest.fixture
def locked(tmp_path: Path, namespace: Namespace) -> Iterator[LockedDown]:
    config_dir = tmp_path / "nats-config"
    write_nats_config(config_dir, [*DEFAULT_ACTORS, "a2a", "console", ALICE], namespace)
    server = EmbeddedServer(tmp_path / "nats", authorization=config_dir / "authorization.conf")
    server.start()
    yield LockedDown(server, config_dir, namespace)
    server.close()


@pytest.mark.parametrize("role", ["a2a", "console"])
async def test_the_edge_and_the_console_cannot_act_as_a_client_or_write(
    locked: LockedDown, role: str
) -> None:
    ns = locked.ns
    registry = CollectorRegistry()
    edge = await locked.connect(role, ActorMetrics(registry, role))
    try:
        policy = ns.bucket("policy")
        with pytest.raises(NotFoundError):  # allowed, and there is no bundle yet
            await locked.js(edge, role).get_msg(
                f"KV_{policy}", subject=f"$KV.{policy}.bundle", seq=None
            )
        refused_publishes = (
            ns.submit(ALICE),  # as a client: only the client's own credentials may
            ns.submit(role),  # as itself: it submits nothing in its own name
            f"$KV.{policy}.bundle",  # the bundle is the signer's to write
            f"{IMPORTED_JS_API}.CONSUMER.CREATE.KV_{policy}",  # no consumer, no watch
        )
        for subject in refused_publishes:
            await edge.publish(subject, b"{}")
            await edge.flush()
        await edge.subscribe(ns.timelines(ALICE))  # a client's sessions are the client's
        await edge.flush()
        assert violations(registry, role) == len(refused_publishes) + 1
    finally:
        await edge.close()
