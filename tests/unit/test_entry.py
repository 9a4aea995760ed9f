"""A Ctrl-C while `parley` loads its command line exits 130 without a traceback
(tools/entry.py; docs/cli.md promises no traceback on Ctrl-C)."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

import pytest

from tools.entry import main as entry


def main() -> int:
    """The entry point, a Ctrl-C escaping it failing this test, not stopping the run."""
    try:
        return entry()
    except KeyboardInterrupt:
        pytest.fail("the Ctrl-C escaped the entry point (a traceback for the person)")


class _InterruptedLoad(importlib.abc.MetaPathFinder):
    """Raises KeyboardInterrupt where the command line is imported, as a Ctrl-C then does."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname == "tools.cli":
            raise KeyboardInterrupt
        return None


def test_a_ctrl_c_while_the_command_line_loads_exits_130_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delitem(sys.modules, "tools.cli", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_InterruptedLoad(), *sys.meta_path])
    assert main() == 130
    assert capsys.readouterr() == ("", "")


def test_a_ctrl_c_that_escapes_the_command_exits_130_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted() -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr("tools.cli.main", interrupted)
    assert main() == 130
    assert capsys.readouterr() == ("", "")
