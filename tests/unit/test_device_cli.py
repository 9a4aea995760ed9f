"""`parley device show` without keys, and `device init` over existing ones, exit 2 (a
configuration to fix) with one line, as `parley share` does for missing keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.cli import main


def test_device_keys_missing_or_kept_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = tmp_path / "device"
    assert main(["device", "show", "--dir", str(keys)]) == 2
    assert capsys.readouterr().err.startswith("parley device show: ")
    assert main(["device", "init", "--dir", str(keys)]) == 0
    capsys.readouterr()
    assert main(["device", "init", "--dir", str(keys)]) == 2
    said = capsys.readouterr().err
    assert said.startswith("parley device init: ") and "--force" in said, said
    assert main(["share", "--list", "--device-dir", str(tmp_path / "none")]) == 2
