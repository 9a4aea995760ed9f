"""`parley up`'s targets file follows what actors and the supervisor say, line by line."""

from __future__ import annotations

import json
from pathlib import Path

from tools._metrics_targets import MetricsTargets


def _served(port: int, host: str = "127.0.0.1") -> str:
    return json.dumps({"level": "info", "msg": "metrics served", "port": port, "host": host})


def _read(path: Path) -> list[dict[str, object]]:
    entries = json.loads(path.read_text())
    assert isinstance(entries, list)
    return entries


def test_an_actor_is_listed_from_its_line_until_it_exits_and_again_on_its_new_port(
    tmp_path: Path,
) -> None:
    path = tmp_path / ".parley" / "prometheus-targets.json"
    targets = MetricsTargets(path)
    targets.write()
    assert _read(path) == []
    targets.line("gate", "started (pid 10)")
    targets.line("gate", _served(4001))
    targets.line("router", _served(4002, "0.0.0.0"))  # a wildcard bind is reached on loopback
    targets.line("router", '{"msg":"ready"}')
    assert _read(path) == [
        {"targets": ["127.0.0.1:4001"], "labels": {"actor": "gate"}},
        {"targets": ["127.0.0.1:4002"], "labels": {"actor": "router"}},
    ]
    targets.line("gate", "exited (killed by SIGKILL); restarting in 0.1s")
    assert [entry["labels"] for entry in _read(path)] == [{"actor": "router"}]
    targets.line("gate", "started (pid 11)")
    targets.line("gate", _served(4003, "::1"))
    assert _read(path)[0] == {"targets": ["[::1]:4003"], "labels": {"actor": "gate"}}
    targets.clear()
    assert _read(path) == []
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no partial file left


def test_lines_that_only_mention_metrics_change_nothing(tmp_path: Path) -> None:
    path = tmp_path / "targets.json"
    targets = MetricsTargets(path)
    targets.line("agent", "[agent] metrics served on the wrong line")
    targets.line("agent", '{"msg":"metrics served","port":"not a port"}')
    targets.line("agent", '{"msg":"said metrics served","port":4000}')
    targets.line("agent", '{"msg":"metrics served", broken')
    assert not path.exists()
