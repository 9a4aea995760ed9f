"""`parley bench --only gate` runs end to end: the raw relay, the guarded relay and the gate,
each moving its whole backlog, and the guarded relay storing what the gate stores.

Real servers and a real gate, as the benchmark runs them; the figures themselves are the
benchmark's to report, not a test's to bound.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS
from nats.js.errors import APIError

from actors.gate._ids import WRONG_LAST_SEQUENCE
from bus import provision
from schemas import Namespace, encode
from tools.bench import main
from tools.bench._gate import _guarded_stores
from tools.bench._kit import bench_envelope


def test_the_gate_rows_move_every_envelope_and_print_the_floor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    args = ["--only", "gate", "--count", "3", "--backlog", "40", "--rounds", "1"]
    assert main([*args, "--out", str(out)]) == 0
    gate = json.loads(out.read_text())["gate"]
    for fsync in ("always", "lazy"):
        rows = gate[fsync]
        for name in ("relay-raw", "relay-guarded", "gate"):
            assert rows[name]["throughput"] > 0, (fsync, name)
        assert set(rows["floor"]) == {"throughput", "added_p50", "added_p99"}
        assert rows["over_floor"]["throughput"] > 0
    printed = capsys.readouterr().out
    assert "relay-guarded" in printed and "what Parley adds" in printed


async def test_the_guarded_relay_stores_what_the_gate_stores(
    nc: NATS, namespace: Namespace
) -> None:
    """The floor is honest only if the guarded relay makes the gate's stores: a claim that
    refuses a second claim of its id, and the trace, position, delivery and decision."""
    js = nc.jetstream()
    await provision(js, namespace)
    envelope = bench_envelope("sink")
    await _guarded_stores(js, namespace, [(envelope, encode(envelope))])
    for bucket, key in (
        ("idempotency", f"id.{envelope.id}"),
        ("traces", f"trace.{envelope.id}"),
        ("traces", f"pos.{envelope.id}"),
    ):
        assert (await (await js.key_value(namespace.bucket(bucket))).get(key)).value
    assert (await js.get_last_msg(namespace.stream("deliver"), namespace.deliver("sink"))).data
    assert (await js.get_last_msg(namespace.stream("events"), namespace.decisions("bench"))).data
    with pytest.raises(APIError) as refused:  # the claim is create-only, as the gate's
        await _guarded_stores(js, namespace, [(envelope, encode(envelope))])
    assert refused.value.err_code == WRONG_LAST_SEQUENCE
