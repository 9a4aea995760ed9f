"""`parley bench` with no flags runs the quick profile; `--full` the long sweeps; an option
given explicitly wins over both; each row prints a line as it starts and as it ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.bench import main
from tools.bench._options import FULL, QUICK, bench_parser, resolve


def _resolved(*argv: str) -> dict[str, object]:
    return vars(resolve(bench_parser("bench").parse_args(list(argv))))


def test_no_flags_is_the_quick_profile_and_it_skips_the_long_gaps() -> None:
    args = _resolved()
    assert {name: args[name] for name in QUICK} == QUICK
    assert args["gaps"] == "0", "an idle gap costs its length per call on every path"


def test_full_is_the_long_sweep_and_explicit_options_win() -> None:
    args = _resolved("--full", "--calls", "7")
    assert args["calls"] == 7
    assert {name: args[name] for name in FULL if name != "calls"} == {
        name: value for name, value in FULL.items() if name != "calls"
    }
    assert args["gaps"] == "0,1,5,30"


def test_each_row_says_when_it_starts_and_ends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--only", "context", "--out", str(tmp_path / "bench.json")]) == 0
    printed = capsys.readouterr().out
    assert "parley bench: row 1 of 1, context: seed 004's context bloat ..." in printed
    assert "parley bench: context done in" in printed
    assert (tmp_path / "bench.json").exists()
