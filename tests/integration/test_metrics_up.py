"""The metrics an operator needs, scraped as Prometheus scrapes them from `parley up`.

`parley up examples/collaborate` runs the gate, the router, the auditor and two agents as real
processes, locked down; the test reads the file_sd targets file `parley up` writes, scrapes
every endpoint over HTTP after a real collaboration, a `say` the gate refuses a step of and
bytes that are no envelope, and parses each exposition with prometheus_client's own parser:
the gate's decisions by kind and code, the router's sessions ended by stop reason, the dead
letter by reason, the auditor caught up with a fresh checkpoint. A router killed with SIGKILL
comes back on a new port, and the file follows it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tests.support.natscli import NatsCli
from tests.support.processes import REPO, close_up, parley_env, parley_up
from tests.support.system import finished, parley_cli

ACTORS = ("gate", "router", "auditor", "gpt", "claude")
GOAL = "Collaborate to outline and refine a 5-step plan for a weekend hiking trip."

Families = dict[str, Metric]


def _targets(home: Path) -> dict[str, str]:
    """The targets file as {actor: "host:port"}, checked to be file_sd's shape."""
    entries = json.loads((home / ".parley" / "prometheus-targets.json").read_text())
    out: dict[str, str] = {}
    for entry in entries:
        assert set(entry) == {"targets", "labels"}, entry
        (target,) = entry["targets"]
        assert re.fullmatch(r"127\.0\.0\.1:\d+", target), target
        out[entry["labels"]["actor"]] = target
    return out


def _scrape_sync(target: str) -> Families:
    with urllib.request.urlopen(f"http://{target}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


async def _scrape(target: str) -> Families:
    return await asyncio.to_thread(_scrape_sync, target)


def _value(families: Families, name: str, **labels: str) -> float | None:
    """The value of the one sample of family `name` carrying `labels`, if there is one."""
    family = families.get(name)
    if family is None:
        return None
    found = [
        sample.value
        for sample in family.samples
        if all(sample.labels.get(key) == value for key, value in labels.items())
        and not sample.name.endswith("_created")
    ]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


async def _until(target: str, holds: Callable[[Families], bool], timeout: float = 30) -> Families:
    """Scrape `target` until `holds` is true of what it says (or fail after `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        families = await _scrape(target)
        if holds(families):
            return families
        assert time.monotonic() < deadline, f"{target} never showed it: {sorted(families)}"
        await asyncio.sleep(0.2)  # a scrape interval: what is awaited is the condition


def _env() -> dict[str, str]:
    env = parley_env("unused", "parley")
    del env["NATS_URL"], env["PARLEY_NAMESPACE"]  # as a person's shell: nothing set
    return env


async def test_up_lists_each_actors_metrics_and_they_count_what_happened(tmp_path: Path) -> None:
    env = _env()
    up = parley_up(REPO / "examples" / "collaborate", env, cwd=tmp_path)
    try:
        await up.wait_line(rf"^\[nats\] ready: {', '.join(ACTORS)};", timeout=90)
        targets = _targets(tmp_path)
        assert sorted(targets) == sorted(ACTORS)
        assert len(set(targets.values())) == len(ACTORS)  # a port each

        code, said = await finished(parley_cli(env, "collab", GOAL, cwd=tmp_path), 90)
        assert code == 0 and said[-1].startswith("stopped: final"), said
        code, said = await finished(parley_cli(env, "say", "@nobody", "hello", cwd=tmp_path), 60)
        assert code != 0 and "TARGET_NOT_ALLOWED" in said[-1], said
        contexts = tmp_path / ".parley" / "nats-contexts"
        cli = await NatsCli.from_context(json.loads((contexts / "cli.json").read_text()))
        try:  # bytes that are no envelope, submitted as the person's commands submit
            await cli.nc.publish("parley.submit.cli", b"not an envelope")
            await cli.nc.flush()
        finally:
            await cli.nc.close()

        ended = "parley_sessions_ended"
        router = await _until(
            targets["router"], lambda f: _value(f, ended, stop_reason="final") is not None
        )
        family = router[ended]
        assert family.type == "counter"
        assert {s.name for s in family.samples} >= {f"{ended}_total"}
        assert _value(router, ended, flow="collaboration", stop_reason="final") == 1
        assert _value(router, ended, actor="router", stop_reason="final") == 1

        decisions = "parley_gate_decisions"
        gate = await _until(
            targets["gate"], lambda f: _value(f, decisions, decision="deny") is not None
        )
        assert gate[decisions].type == "counter"
        allowed = {"actor": "gate", "decision": "allow", "code": "none"}
        # The person sent two messages (the collaboration, the `say`): each counted once.
        assert _value(gate, decisions, kind="human_message", **allowed) == 2
        assert (_value(gate, decisions, kind="agent_call", **allowed) or 0) >= 2
        assert (_value(gate, decisions, kind="agent_response", **allowed) or 0) >= 2
        refused = [
            (s.labels["kind"], s.labels["code"], s.value)
            for s in gate[decisions].samples
            if s.name == f"{decisions}_total" and s.labels["decision"] == "deny"
        ]  # the router's call to an agent the policy does not let it reach
        assert refused == [("agent_call", "TARGET_NOT_ALLOWED", 1.0)]
        router = await _until(
            targets["router"], lambda f: _value(f, ended, stop_reason="error") is not None
        )
        assert _value(router, ended, flow="collaboration", stop_reason="error") == 1

        dead = "parley_dead_lettered"
        gate = await _until(targets["gate"], lambda f: _value(f, dead, actor="gate") is not None)
        assert gate[dead].type == "counter"
        (bad,) = [s for s in gate[dead].samples if s.name == f"{dead}_total"]
        assert bad.labels["reason"].startswith("decode_") and bad.value == 1, bad

        lag = "parley_audit_lag_messages"
        auditor = await _until(
            targets["auditor"],
            lambda f: (
                lag in f and len(f[lag].samples) == 2 and not any(s.value for s in f[lag].samples)
            ),
        )
        assert auditor[lag].type == "gauge"
        assert {s.labels["stream"] for s in auditor[lag].samples} == {
            "PARLEY_EVENTS",
            "PARLEY_DEAD",
        }
        age = _value(auditor, "parley_audit_checkpoint_age_seconds", actor="auditor")
        assert age is not None and 0 <= age < 90, age
        unpinned = _value(auditor, "parley_audit_unpinned_records", actor="auditor")
        assert unpinned is not None and unpinned >= 0

        for actor, target in targets.items():  # every endpoint answers, as itself
            families = await _scrape(target)
            handled = families["parley_messages_handled"]
            assert {s.labels["actor"] for s in handled.samples} <= {actor}

        pid_line = await up.wait_line(r"^\[router\] started \(pid \d+\)")
        pid = int(re.findall(r"pid (\d+)", pid_line[1])[0])
        old = targets["router"]
        after = len(up.lines)
        os.kill(pid, signal.SIGKILL)
        # `parley up` writes the targets file before it prints the line that moved it.
        await up.wait_line(r'^\[router\] .*"msg":"metrics served"', start=after, timeout=60)
        moved = _targets(tmp_path)["router"]
        assert moved != old
        assert "parley_messages_handled" in await _scrape(moved)

        up.signal(signal.SIGINT)
        assert await up.wait_exit(timeout=30) == 0
        assert _targets(tmp_path) == {}
    finally:
        close_up(up)
