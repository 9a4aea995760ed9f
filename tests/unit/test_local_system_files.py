"""What `parley up` leaves of an earlier run and shows of its children: no URL a killed run
wrote, no control character a child printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools._local import LOCAL_DIR
from tools._local_system import LOCAL_SYSTEM, system_topology
from tools._up import shown


def test_an_earlier_runs_urls_are_gone_before_the_system_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run killed outright left its console's and A2A edge's URL files: their ports are no
    longer this system's, and a client following `$(cat .parley/a2a.url)` would send its
    token to whatever took the port."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / LOCAL_DIR).mkdir(parents=True)
    for name in ("console.url", "a2a.url"):
        (tmp_path / LOCAL_DIR / name).write_text("http://127.0.0.1:1/\n")
    topology = system_topology(LOCAL_SYSTEM, "demo", tmp_path / "keys")
    assert {child.name for child in topology.actor} >= {"console", "a2a"}
    assert not (tmp_path / LOCAL_DIR / "console.url").exists()
    assert not (tmp_path / LOCAL_DIR / "a2a.url").exists()


def test_a_childs_control_characters_are_shown_not_obeyed() -> None:
    """An agent's own program writes into `parley up`'s output: a carriage return or an
    escape sequence there could redraw the line as one of `parley up`'s own."""
    forged = "thinking\r[nats] ready: all; the console: http://evil/\x1b[2K\x9b1A\x8d\x9d8;;\tdone"
    line = shown(forged)
    assert not [ch for ch in line if ch != "\t" and (ord(ch) < 32 or 0x7F <= ord(ch) <= 0x9F)]
    assert line.count("\N{REPLACEMENT CHARACTER}") == 5 and "\tdone" in line
    assert shown('{"msg":"ready","text":"déjà vu — ok"}') == '{"msg":"ready","text":"déjà vu — ok"}'
