"""A principal allowed to put one key of a shared bucket cannot wipe the others.

A put is a JetStream publish on `$KV.<bucket>.<key>`, and JetStream reads a `Nats-Rollup`
header on any publish to a stream that takes rollups: `all` purges the whole stream. nats-py
makes every bucket take them, so an agent's own heartbeat, sent with `Nats-Rollup: all`,
erased every agent's profile and heartbeat from the registry (the router could no longer find
anyone, and a loop of it kept every agent judged down). Provisioning now refuses rollups on
every bucket but the router's sessions (bus/_streams.py `BucketSpec.rollup`).

Under the least-privilege config of `parley nats-config` on a real nats-server, the attacker
holding only its own credentials: an agent (gpt) and a person (cli).
"""

from __future__ import annotations

import pytest
from nats.js.errors import APIError

from bus import BUCKETS
from schemas import heartbeat_key
from tests.support.lockdown import LockedDown


@pytest.mark.parametrize("attacker", ["gpt", "cli"])
@pytest.mark.parametrize("rollup", ["all", "sub"])
async def test_a_rollup_on_ones_own_registry_key_is_refused_and_wipes_nothing(
    locked_down: LockedDown, attacker: str, rollup: str
) -> None:
    await locked_down.provision()
    ns = locked_down.ns
    registry = ns.bucket("registry")
    claude = await locked_down.connect("claude")
    victim = await locked_down.js(claude, "claude").key_value(registry)
    await victim.put(heartbeat_key("claude"), b'{"alive": true}')
    await victim.put("profile.claude", b'{"name": "claude"}')
    await claude.close()

    nc = await locked_down.connect(attacker)
    try:
        own = await locked_down.js(nc, attacker).key_value(registry)
        with pytest.raises(APIError, match="rollup not permitted"):  # as a put, its headers added
            await locked_down.js(nc, attacker).publish(
                f"{own._pre}{heartbeat_key(attacker)}", b"{}", headers={"Nats-Rollup": rollup}
            )
        await own.put(heartbeat_key(attacker), b"{}")  # its own put, as ever
    finally:
        await nc.close()

    admin = await locked_down.connect("provisioner")
    try:
        info = await admin.jetstream().stream_info(
            f"KV_{registry}", subjects_filter=f"$KV.{registry}.>"
        )
        kept = {subject.split(".", 2)[2] for subject in info.state.subjects or {}}
        assert {heartbeat_key("claude"), "profile.claude"} <= kept, kept
    finally:
        await admin.close()


async def test_only_the_sessions_bucket_takes_rollups(locked_down: LockedDown) -> None:
    """The router replaces an ended session's history with one value (a rollup of its own
    key); every other bucket, including those made before this release, refuses them."""
    await locked_down.provision()
    admin = await locked_down.connect("provisioner")
    try:
        js = admin.jetstream()
        older = locked_down.ns.bucket("registry")  # as an earlier release left it: rollups on
        config = (await js.stream_info(f"KV_{older}")).config
        config.allow_rollup_hdrs = True
        await js.update_stream(config)
        await locked_down.provision()
        taking = {
            spec.name
            for spec in BUCKETS
            if (
                await js.stream_info(f"KV_{locked_down.ns.bucket(spec.name)}")
            ).config.allow_rollup_hdrs
        }
    finally:
        await admin.close()
    assert taking == {"sessions"}
