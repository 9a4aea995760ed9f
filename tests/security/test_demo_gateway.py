"""The gateway `parley demo --shared` and `parley chaos --shared` run between the deployments
is locked down as `parley gateway-config` writes one: a local process without credentials
cannot connect to it, and one relay's device credentials reach only that device's frames.

The deployments are the demo's own (tools/_shared_deployments.py), prepared without their
actors: what is attacked is the gateway they are given. That the demo still runs to its end
through it, each relay logging in with its device's seed, is tests/integration/test_shared_demo.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NATS

from actors.relay import gateway_stream
from tools._shared_deployments import GATEWAY_ROOT, SharedDeployments, prepared_deployments
from tools.natsconf import GATEWAY_ADMIN, connect_gateway_operator

STREAM = gateway_stream(GATEWAY_ROOT).name or ""


@pytest.fixture
async def deployments(tmp_path: Path) -> AsyncIterator[SharedDeployments]:
    async with prepared_deployments(tmp_path) as up:
        yield up


async def test_a_connection_without_credentials_is_refused(deployments: SharedDeployments) -> None:
    stranger = NATS()
    try:
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await stranger.connect(
                deployments.gateway.url, allow_reconnect=False, max_reconnect_attempts=0
            )
    finally:
        await stranger.close()  # the refused attempt's socket too


async def _as_device(up: SharedDeployments, device: str, errors: list[str]) -> NATS:
    """A connection with `device`'s gateway credentials, as its relay makes it."""

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    return await nats.connect(
        up.gateway.url,
        nkeys_seed=str(up.gateway_seeds[device]),
        inbox_prefix=f"_INBOX_{device[:16]}".encode(),
        error_cb=on_error,
        allow_reconnect=False,
    )


async def test_one_devices_credentials_cannot_forge_anothers_frames_or_delete_the_stream(
    deployments: SharedDeployments,
) -> None:
    alice, bob = deployments.alice.keys.device_id, deployments.bob.keys.device_id
    violations: list[str] = []
    nc = await _as_device(deployments, alice, violations)
    try:
        js = nc.jetstream()
        # Her own frame to Bob is stored: the credentials work, what follows is their limit.
        ack = await js.publish(f"{GATEWAY_ROOT}.{bob}.{alice}", b"alice's own frame")
        assert ack.stream == STREAM
        await nc.publish(f"{GATEWAY_ROOT}.{alice}.{bob}", b"a frame in Bob's name")
        await nc.publish(f"$JS.API.STREAM.DELETE.{STREAM}", b"")
        await nc.publish(f"$JS.API.STREAM.PURGE.{STREAM}", b"")
        await nc.subscribe(f"{GATEWAY_ROOT}.{bob}.*")  # Bob's incoming frames
        deadline = asyncio.get_running_loop().time() + 15
        while len(violations) < 4 and asyncio.get_running_loop().time() < deadline:
            await nc.flush()  # each round trip lets the server's -ERR lines arrive
    finally:
        await nc.close()
    assert len(violations) == 4, violations
    assert all("permissions violation" in v.lower() for v in violations), violations
    operator = await connect_gateway_operator(
        deployments.gateway.url, deployments.gateway_seeds[GATEWAY_ADMIN]
    )
    try:
        info = await operator.jetstream().stream_info(STREAM)
    finally:
        await operator.close()
    assert info.state.messages == 1  # Alice's own frame: nothing forged, nothing purged
