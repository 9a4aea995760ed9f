"""`parley bench --only llm` runs end to end (issue 32): a streamed model call through a real
gate and a real LLM gateway, beside a client reading the same local provider directly, with
each path's p50 to the first chunk and to the whole answer, the ratios and a verdict against
the 1.2x and 1.1x aims; and the verdict can fail. Then a 200 KB answer streams through the
same gateway, answered whole (the gateway's CPU for it is the benchmark's figure).

Small counts: the figures are the benchmark's to report, never a test's to bound.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench import main
from tools.bench._llmstream import FIRST_AIM, PATHS, WHOLE_AIM, summarise_llm


def test_the_llm_row_streams_through_both_paths_and_prints_a_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = ["--only", "llm", "--llm-calls", "2", "--rounds", "1", "--out", str(out)]
    assert main(argv) == 0
    row = json.loads(out.read_text())["llm"]
    for path in PATHS:
        assert row[path]["calls"] == 2, (path, row)
        # The provider's first chunk comes after 50 ms and its last 500 ms later.
        assert 50 <= row[path]["first_p50_ms"] < row[path]["whole_p50_ms"], (path, row)
        assert row[path]["whole_p50_ms"] >= 550, (path, row)
    first, whole = row["first_parley_to_direct"], row["whole_parley_to_direct"]
    assert row["pass"] == (first <= FIRST_AIM and whole <= WHOLE_AIM), row
    long = row["long"]  # 200 KB streamed through the gateway: guarded at every piece, cut
    assert long["outcome"] == "answered whole" and long["pieces"] == 50_000, long
    printed = capsys.readouterr().out
    verdicts = [line for line in printed.splitlines() if line.startswith("parley / direct")]
    assert len(verdicts) == 1 and verdicts[0].rstrip().endswith(("PASS", "FAIL")), printed


def _samples(first: float, whole: float) -> list[tuple[float, float]]:
    return [(first * (1 + i / 100), whole * (1 + i / 100)) for i in range(20)]


def test_the_llm_verdict_fails_past_either_aim_or_with_nothing_measured() -> None:
    direct = _samples(0.050, 0.550)
    assert summarise_llm({"direct": direct, "parley": _samples(0.055, 0.560)})["pass"]
    late_first = summarise_llm({"direct": direct, "parley": _samples(0.070, 0.560)})
    assert not late_first["pass"] and late_first["first_parley_to_direct"] > FIRST_AIM
    late_whole = summarise_llm({"direct": direct, "parley": _samples(0.055, 0.700)})
    assert not late_whole["pass"] and late_whole["whole_parley_to_direct"] > WHOLE_AIM
    assert not summarise_llm({"direct": direct, "parley": []})["pass"]
