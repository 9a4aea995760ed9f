"""`parley bench --only tools` runs end to end (issue 31): a 4 KiB File.Read through a real gate
and a real tool runtime, beside raw nats-py request/reply and the guarded reference doing the
same read, with each path's p50/p99, the ratio and a verdict against the 2x aim; and the
verdict can fail.

Small counts: the figures are the benchmark's to report, never a test's to bound.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client as NATS
from nats.js.errors import APIError

from actors.gate._ids import WRONG_LAST_SEQUENCE
from schemas import (
    Namespace,
    ToolRequest,
    ToolResult,
    decode_envelope,
    derive_id,
    encode,
    new_id,
    utc_now,
)
from tests.support.kv import stored_keys
from tools.bench import main
from tools.bench._rawtools import AGENT, guarded_step
from tools.bench._toolcall import AIM_RATIO, PATHS, summarise_tools


def test_the_tools_row_reads_through_every_path_and_prints_a_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = ["--only", "tools", "--tool-calls", "3", "--rounds", "1", "--out", str(out)]
    assert main(argv) == 0
    tools = json.loads(out.read_text())["tools"]
    for fsync in ("always", "lazy"):
        row = tools[fsync]
        for path in PATHS:
            assert row[path]["calls"] == 3, (fsync, path, row)
            assert 0 < row[path]["p50_us"] <= row[path]["p99_us"], (fsync, path, row)
            assert row[path]["cpu_ms"] >= row[path]["server_cpu_ms"] >= 0, (fsync, path, row)
        assert row["p50_parley_to_raw"] > 0 and row["p50_parley_to_guarded"] > 0, row
        assert row["pass"] == (row["p50_parley_to_raw"] <= AIM_RATIO), row
    printed = capsys.readouterr().out
    verdicts = [line for line in printed.splitlines() if line.startswith("parley / raw p50")]
    assert len(verdicts) == 2, printed
    assert all(f"aim <= {AIM_RATIO:g}x" in line for line in verdicts), printed
    assert all(line.rstrip().endswith(("PASS", "FAIL")) for line in verdicts), printed
    assert "parley / guarded p50" in printed, printed


def _samples(seconds: float) -> list[float]:
    return [seconds * (1 + i / 100) for i in range(100)]


def test_a_parley_path_slower_than_twice_the_raw_one_fails_the_aim() -> None:
    raw, guarded = _samples(400e-6), _samples(20e-3)
    within = summarise_tools({"raw": raw, "guarded": guarded, "parley": _samples(700e-6)})
    assert within["pass"] and within["p50_parley_to_raw"] == pytest.approx(1.75), within
    slow = summarise_tools({"raw": raw, "guarded": guarded, "parley": _samples(21e-3)})
    assert not slow["pass"] and slow["p50_parley_to_raw"] > 50, slow
    assert slow["p50_parley_to_guarded"] == pytest.approx(1.05), slow
    unmeasured = summarise_tools({"raw": raw, "guarded": guarded, "parley": []})
    assert not unmeasured["pass"], unmeasured


async def test_the_guarded_reference_makes_the_stores_of_parleys_path(
    nc: NATS, namespace: Namespace, tmp_path: Path
) -> None:
    """Its floor is honest only if it stores what the gate and the runtime store: the claims
    of the request's and the result's ids, their trace records, positions, deliveries and
    decisions, and the step's run mark (create-only) with the result over it."""
    (tmp_path / "s1").mkdir()
    (tmp_path / "s1" / "f.txt").write_text("four kib stand-in")
    request = ToolRequest(
        id=new_id(), created_at=utc_now(), tool_name="File.Read", arguments={"path": "f.txt"},
        session_id="s1", task_id="t1", step_id=new_id(),
    )  # fmt: skip
    js = nc.jetstream()
    await guarded_step(js, namespace, encode(request), tmp_path)
    result_id = derive_id(request.id, "tool_result")
    ids = await js.key_value(namespace.bucket("idempotency"))
    traces = await js.key_value(namespace.bucket("traces"))
    for envelope_id in (request.id, result_id):
        assert (await ids.get(f"id.{envelope_id}")).value
        for key in (f"trace.{envelope_id}", f"pos.{envelope_id}"):
            assert (await traces.get(key)).value
    runs = await js.key_value(namespace.bucket("tool_runs"))
    (run,) = await stored_keys(js, namespace.bucket("tool_runs"))
    entry = await runs.get(run)
    assert entry.revision == 2 and b"four kib stand-in" in (entry.value or b"")
    delivered = await js.get_last_msg(namespace.stream("deliver"), namespace.deliver(AGENT))
    answer = decode_envelope(delivered.data or b"")
    assert isinstance(answer, ToolResult) and answer.output_text == "four kib stand-in"
    assert (await js.get_last_msg(namespace.stream("deliver"), namespace.deliver("tools"))).data
    assert (await js.get_last_msg(namespace.stream("events"), namespace.decisions("bench"))).data
    with pytest.raises(RuntimeError, match="exists"):  # the request's id is looked up first
        await guarded_step(js, namespace, encode(request), tmp_path)
    again = msgspec.structs.replace(request, id=new_id())  # the same step, a fresh envelope
    with pytest.raises(APIError) as refused:  # the run mark is create-only, as the runtime's
        await guarded_step(js, namespace, encode(again), tmp_path)
    assert refused.value.err_code == WRONG_LAST_SEQUENCE


def test_the_help_names_the_tools_row(capsys: pytest.CaptureFixture[str]) -> None:
    """`parley bench --help` prints (every option's help is a format string to argparse)."""
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "`tools`: a 4 KiB File.Read through the gate" in printed, printed
