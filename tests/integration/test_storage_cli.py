"""`parley storage` (docs/quotas.md): each stream's and bucket's use against its quota, each
agent's own buckets among them, read as the provisioner under the least-privilege config, the
way an operator runs it."""

from __future__ import annotations

from bus import BUCKETS, STREAM_FAMILIES
from tests.support.lockdown import LockedDown
from tests.support.processes import parley_env
from tests.support.system import finished, parley_cli


async def test_storage_prints_use_limit_and_percent_per_stream_and_bucket(
    locked_down: LockedDown,
) -> None:
    locked, ns = locked_down, locked_down.ns
    await locked.provision()
    admin = await locked.connect("provisioner")  # publishing bundles is an operator's act
    try:
        policy = await admin.jetstream().key_value(ns.bucket("policy"))
        await policy.put("bundle", b"b" * (160 * 1024))
    finally:
        await admin.close()

    env = parley_env(locked.server.url, ns.root)
    config = ("--config", str(locked.settings_file("provisioner")))
    code, lines = await finished(parley_cli(env, "storage", *config), 60)
    assert code == 0, lines
    rows = {line.split()[0]: line.split() for line in lines if line.strip()}
    names = [ns.stream(family) for family in STREAM_FAMILIES]
    names += [f"KV_{ns.bucket(spec.name)}" for spec in BUCKETS]
    assert set(names) <= set(rows), lines
    # Each agent's own waits bucket, at its own quota, after the shared ones (issue 30).
    waits = [f"KV_{ns.agent_bucket('waits', agent)}" for agent in ("claude", "gpt")]
    assert [line.split()[0] for line in lines if "_waits_" in line] == waits, lines
    for name in waits:
        assert rows[name][1:] == ["0", "B", "0", "16.0", "MiB", "0.0%"], lines
    for agent in ("claude", "gpt"):  # and its own reminders stream
        assert rows[ns.agent_stream("timers", agent)][1:] == ["0", "B", "0", "8.0", "MiB", "0.0%"]
    # name, bytes (value, unit), messages, limit (value, unit), used
    assert rows[ns.stream("submit")][1:] == ["0", "B", "0", "256.0", "MiB", "0.0%"], lines
    held = rows[f"KV_{ns.bucket('policy')}"]
    assert held[2:7] == ["KiB", "1", "32.0", "MiB", "0.5%"], lines
    assert 160 <= float(held[1]) < 161, lines
    account = [line for line in lines if line.startswith("account:")]
    assert account and "of 16.0 GiB" in account[0], lines
