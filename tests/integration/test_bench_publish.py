"""`parley bench --only publish` stores every message in each of the three modes.

A real server at each fsync setting, as the benchmark runs it. The run itself checks each
stream's count against what was published (a mode that stored fewer raises); this test checks
the rows are all there and that a fast batch is answered once per batch, which is what makes
it cheaper than one answer per message. The rates are the benchmark's to report.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench import main
from tools.bench._publish import MODES


def test_the_publish_row_stores_every_batch_in_each_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = ["--only", "publish", "--rounds", "1", "--publish-batches", "5", "--out", str(out)]
    assert main(argv) == 0
    rows = json.loads(out.read_text())["publish"]
    assert [(row["mode"], row["fsync"]) for row in rows] == [
        (mode, fsync) for fsync in ("always", "lazy") for mode in MODES
    ]
    assert all(row["per_s"] > 0 for row in rows)
    assert all(row["ratio"] == 1.0 for row in rows if row["mode"] == "one-ack-each")
    # One answer per message has no flow control; a fast batch of 64 gets at most one flow
    # ack besides its commit's answer (it fits in the flow the batch asks for).
    assert all(row["flow_acks_per_batch"] == 0 for row in rows if row["mode"] != "fast")
    assert all(row["flow_acks_per_batch"] <= 1 for row in rows if row["mode"] == "fast")
    assert "flow acks/batch" in capsys.readouterr().out
