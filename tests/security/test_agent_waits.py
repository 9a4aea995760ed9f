"""Issue 30: one agent could fill the bucket every agent keeps its waits in. Each agent's waits
now live in a bucket of its own (`parley_waits_<agent>`), bounded on its own (docs/quotas.md),
which no other agent may open, read or write.

Both tests run the least-privilege config of `parley nats-config` on a real nats-server; the
attacker is a raw nats-py client holding one agent's own credentials:

- mallory, an agent that takes no part, fills every waits bucket its grants let it write, to
  the last bytes; the planner's delegation to the three specialists, real agent processes,
  still completes for the person (`parley delegate`);
- gpt can neither open, read, write nor follow claude's waits bucket, while it uses its own;
- an agent host whose bucket the provisioner never made refuses to start, naming it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import ConsumerConfig
from nats.js.errors import APIError
from nats.js.kv import KeyValue
from prometheus_client import CollectorRegistry

from bus import ActorMetrics, EmbeddedServer
from schemas import Namespace
from tests.support.lockdown import LOCKED_ACTORS, LockedDown, violations
from tests.support.processes import parley_env, start_actor
from tests.support.system import finished, parley_cli, running_locked_system
from tools.natsconf import permissions_for, write_nats_config
from tools.provision import provision_once

MIB = 1024 * 1024
_WAITS_BYTES = 2 * MIB
_DELEGATION = {name: name for name in ("planner", "researcher", "coder", "reviewer")}
_REFUSED = (TimeoutError, NatsTimeoutError)  # a refused request is never answered


@pytest.fixture
def with_mallory(tmp_path: Path, namespace: Namespace) -> Iterator[LockedDown]:
    """`locked_down` with the delegation demo's agents and mallory, an agent nobody calls."""
    config_dir = tmp_path / "nats-config"
    write_nats_config(config_dir, [*LOCKED_ACTORS, *_DELEGATION, "mallory"], namespace)
    server = EmbeddedServer(tmp_path / "nats", authorization=config_dir / "authorization.conf")
    server.start()
    yield LockedDown(server, config_dir, namespace)
    server.close()


def _waits_buckets(ns: Namespace, agent: str) -> list[str]:
    """Every waits bucket `agent`'s grants let it write keys in (`$KV.<bucket>.<key>`)."""
    buckets = [
        subject.split(".")[1]
        for subject in permissions_for(agent, ns).publish_allow
        if subject.startswith("$KV.") and "waits" in subject.split(".")[1]
    ]
    assert buckets, f"{agent} may write no waits at all"
    return list(dict.fromkeys(buckets))


async def _fill(kv: KeyValue, key_prefix: str, largest: int) -> int:
    """Put ever smaller values under `key_prefix` until the bucket refuses even 64 bytes:
    full to its last bytes. Returns how many values it took."""
    size, stored = largest, 0
    while True:
        try:
            await kv.put(f"{key_prefix}.{stored}", b"w" * size)
            stored += 1
        except APIError as exc:
            assert "maximum bytes" in str(exc).lower(), exc
            if size <= 64:
                return stored
            size //= 4


async def test_one_agent_filling_its_waits_stops_nobody_elses_delegation(
    with_mallory: LockedDown, tmp_path: Path
) -> None:
    locked, ns = with_mallory, with_mallory.ns
    locked.tune("provisioner", quotas=f"{{ bucket_bytes = {{ waits = {_WAITS_BYTES} }} }}")
    async with running_locked_system(locked, tmp_path / "keys", agents=_DELEGATION):
        mallory = await locked.connect("mallory")
        try:
            js = locked.js(mallory, "mallory")
            for bucket in _waits_buckets(ns, "mallory"):
                kv = await js.key_value(bucket)
                stored = await _fill(kv, "mallory.flood", mallory.max_payload - 4096)
                assert stored >= 2, bucket
        finally:
            await mallory.close()

        # The planner stores a wait of its own for the three specialists it asks at once.
        env = parley_env(locked.server.url, ns.root)
        cli = ("delegate", "--config", str(locked.settings_file("cli")), "--deadline-ms", "20000")
        code, lines = await finished(parley_cli(env, *cli, "@planner", "Assess the parser"), 90)
        assert code == 0, lines
        assert any(line.startswith("planner returned: SUCCESS") for line in lines), lines
        assert "\n".join(lines).count("[success]") == 3, lines

        admin = await locked.connect("provisioner")
        try:  # what mallory filled was its own bucket, at its own quota
            own = await admin.jetstream().stream_info(f"KV_{ns.agent_bucket('waits', 'mallory')}")
            assert _WAITS_BYTES - 4096 <= own.state.bytes <= _WAITS_BYTES, own.state
        finally:
            await admin.close()


async def test_an_agent_cannot_reach_another_agents_waits(locked_down: LockedDown) -> None:
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    registry = CollectorRegistry()
    gpt = await locked.connect("gpt", ActorMetrics(registry, "gpt"))
    claude = await locked.connect("claude")
    theirs = ns.agent_bucket("waits", "claude")
    secret = "claude.wait.secret"
    try:
        claudes = await locked.js(claude, "claude").key_value(theirs)
        await claudes.put(secret, b"claude's own")

        # Its own bucket it opens, writes and reads, key by key.
        mine = await locked.js(gpt, "gpt").key_value(ns.agent_bucket("waits", "gpt"))
        await mine.put("gpt.wait.own", b"gpt's own")
        own = await mine.get("gpt.wait.own")
        assert own.value == b"gpt's own"

        js = gpt.jetstream(prefix=locked.settings("gpt").js_api_prefix, timeout=1)
        stream = f"KV_{theirs}"
        refused: list[Coroutine[Any, Any, object]] = [
            js.key_value(theirs),  # opening it
            js.publish(f"$KV.{theirs}.{secret}", b"forged"),  # a put is a JetStream publish
            js.publish(f"$KV.{theirs}.gpt.wait.planted", b"planted"),
            js.get_msg(stream, subject=f"$KV.{theirs}.{secret}", direct=True),
            js.get_msg(stream, 1),  # by sequence
            js.add_consumer(stream, ConsumerConfig(filter_subject=f"$KV.{theirs}.>")),  # a watch
            js.purge_stream(stream),
            js.delete_stream(stream),
        ]
        outcomes = await asyncio.gather(*refused, return_exceptions=True)  # each waits 1 s
        assert all(isinstance(outcome, _REFUSED) for outcome in outcomes), outcomes
        await _barrier(gpt)
        assert violations(registry, "gpt") == len(refused)

        # claude's waits are as claude left them, and nothing was added.
        kept = await claudes.get(secret)
        assert kept.value == b"claude's own" and kept.revision == 1
        info = await locked.js(claude, "claude").stream_info(stream)
        assert info.state.messages == 1, info.state
    finally:
        for nc in (gpt, claude):
            await nc.close()


async def _barrier(nc: NATS) -> None:
    """Return once the server has handled every command sent on `nc` before this call (see
    tests/integration/test_least_privilege.py: one flush is no barrier)."""
    await nc.flush()
    await nc.flush()


async def test_an_agent_host_without_its_waits_bucket_refuses_to_start(
    with_mallory: LockedDown,
) -> None:
    """It may not create its bucket, and would fail each call it delegates without it: it
    says which bucket is missing and exits as misconfigured, instead of crashing in a loop."""
    locked, ns = with_mallory, with_mallory.ns
    await provision_once(locked.settings_file("provisioner"), locked.server.url)  # no agents
    env = parley_env(locked.server.url, ns.root)
    config = ("--config", str(locked.settings_file("planner")))
    planner = start_actor("agent", "planner", env, "--profile", "planner", *config)
    try:
        bucket = ns.agent_bucket("waits", "planner")
        await planner.wait_line(rf"refusing to start.*{bucket}.*run `parley provision`")
        assert await planner.wait_exit() == 2
    finally:
        planner.close()
