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


def test_device_show_prints_the_public_id_alone_for_the_other_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/relay.md: `parley device show` prints the public id, which the other side gives
    `share --with`; it printed two labelled lines, and `$(parley device show)` took both."""
    keys = tmp_path / "device"
    assert main(["device", "init", "--dir", str(keys)]) == 0
    init = capsys.readouterr().out
    assert main(["device", "show", "--dir", str(keys)]) == 0
    shown = capsys.readouterr()
    public = shown.out.strip()
    assert shown.out == f"{public}\n" and f"public id:  {public}" in init, (shown, init)
    ed25519, _, x25519 = public.partition(".")
    assert len(ed25519) == 64 and len(x25519) == 64, public
    assert main(["device", "show", "--dir", str(keys), "--device-id"]) == 0
    assert capsys.readouterr().out == f"{ed25519}\n"  # the device id: its Ed25519 key
