"""Fixtures: a real nats-server per test session, a fresh namespace per test, and private
servers for tests that kill the server.

Nothing here imitates NATS: every test that needs the bus talks to a real nats-server started
on a loopback port the OS picks, with its own JetStream directory.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NATS

from bus import EmbeddedCluster, EmbeddedServer, provision
from schemas import Namespace
from tests.support.cluster import told_of_every_node
from tests.support.lockdown import LOCKED_ACTORS, LockedDown
from tests.support.tool_system import ToolSystem, running_tool_system
from tests.support.wire import Effects
from tools.natsconf import write_nats_config


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    """One nats-server for the whole session; tests keep apart through their namespace.

    Each namespace's streams and buckets reserve their byte quotas (3.2 GiB by default,
    `Quotas.total_bytes`), and a session makes hundreds of namespaces: the server may promise
    far more than the disk's three quarters it promises by default. What the tests store
    stays small."""
    server = EmbeddedServer(tmp_path_factory.mktemp("nats-shared"), max_file_store="1PB")
    server.start()
    yield server
    server.close()


@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A nats-server of this test's own, free to be killed and restarted."""
    server = EmbeddedServer(tmp_path / "nats")
    server.start()
    yield server
    server.close()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    """A 3-node JetStream cluster of this test's own on loopback, its nodes free to be killed
    and restarted; started once every node follows one metadata leader and tells its clients
    of all three nodes. A node can follow the leader with a route to one peer only, and a
    client of it then sees a cluster of two: provisioning from there chose one replica."""
    nodes = EmbeddedCluster(3, tmp_path / "cluster")
    nodes.start()
    try:
        for url in nodes.url.split(","):
            await told_of_every_node(url, 3)
        yield nodes
    finally:
        nodes.close()


@pytest.fixture
def namespace() -> Namespace:
    """Subjects, streams and buckets no other test uses."""
    return Namespace(f"t{uuid.uuid4().hex[:12]}")


@pytest.fixture
async def nc(nats_server: EmbeddedServer, namespace: Namespace) -> AsyncIterator[NATS]:
    """A client connection with this test's namespace provisioned."""
    client = await nats.connect(nats_server.url)
    await provision(client.jetstream(), namespace)
    yield client
    await client.close()


@pytest.fixture
async def effects(nc: NATS, namespace: Namespace) -> AsyncIterator[Effects]:
    """What the test's `probe` actor submits, in order."""
    reader = Effects(nc.jetstream(), namespace, "probe")
    await reader.open()
    yield reader


@pytest.fixture
def locked_down(tmp_path: Path, namespace: Namespace) -> Iterator[LockedDown]:
    """A nats-server of this test's own running `parley nats-config`'s least-privilege config
    (one nkey user per actor), with nothing provisioned yet."""
    config_dir = tmp_path / "nats-config"
    write_nats_config(config_dir, LOCKED_ACTORS, namespace)
    server = EmbeddedServer(tmp_path / "nats", authorization=config_dir / "authorization.conf")
    server.start()
    yield LockedDown(server, config_dir, namespace)
    server.close()


@pytest.fixture(scope="session")
async def tool_system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ToolSystem]:
    """One locked-down system with the tool runtime per test process, shared by the
    end-to-end tool tests: each asks its own agent, in sessions of its own
    (tests/support/tool_system.py)."""
    async with running_tool_system(tmp_path_factory.mktemp("tool-system")) as system:
        yield system
