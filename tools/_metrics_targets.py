"""`parley up`'s Prometheus targets: a file_sd file naming every actor's metrics endpoint.

Every actor `parley up` starts serves Prometheus metrics on a port of its own, picked free at
each start (`metrics_port = 0`) and said in its "metrics served" log line. `parley up` reads
that line and keeps `.parley/prometheus-targets.json` in Prometheus's file_sd format,
`[{"targets": ["127.0.0.1:PORT"], "labels": {"actor": NAME}}]`, so a Prometheus with a
`file_sd_configs` entry naming the file follows the actors through their restarts: an actor
that exits leaves the file until its next start serves again, and `parley up` leaves an empty
list when it stops. Each write replaces the file whole (a rename), as file_sd asks, so a
reader never sees half of one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Final

__all__ = ("METRICS_SERVED", "TARGETS_FILE", "MetricsTargets")

TARGETS_FILE: Final = "prometheus-targets.json"
"""The file's name under `parley up`'s directory (`.parley/`)."""
METRICS_SERVED: Final = "metrics served"
"""The message of an actor's log line that names its metrics port (bus/_runner.py)."""
_WILDCARDS: Final = frozenset({"", "0.0.0.0", "::"})  # noqa: S104 - names a bind, binds nothing


class MetricsTargets:
    """The endpoints of the actors running now, written to `path` on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._targets: dict[str, str] = {}

    def write(self) -> None:
        """Replace the file with the endpoints known now (an empty list for none)."""
        entries = [
            {"targets": [target], "labels": {"actor": name}}
            for name, target in sorted(self._targets.items())
        ]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        partial.write_text(json.dumps(entries, indent=2) + "\n")
        os.replace(partial, self.path)

    def clear(self) -> None:
        """Every actor has stopped: no endpoint answers any more."""
        self._targets.clear()
        self.write()

    def line(self, name: str, line: str) -> None:
        """Follow actor `name`'s output: its endpoint when it says where it serves metrics;
        none from when the supervisor starts or loses its process until it says so again."""
        if line.startswith(("started (pid", "exited (", "stopped (")):  # the supervisor's
            if self._targets.pop(name, None) is not None:
                self.write()
            return
        if METRICS_SERVED not in line or not line.startswith("{"):
            return
        try:
            said = json.loads(line)
        except ValueError:
            return
        if not isinstance(said, dict) or said.get("msg") != METRICS_SERVED:
            return
        port, host = said.get("port"), said.get("host", "127.0.0.1")
        if not isinstance(port, int) or not isinstance(host, str):
            return
        reach = "127.0.0.1" if host in _WILDCARDS else host
        self._targets[name] = f"[{reach}]:{port}" if ":" in reach else f"{reach}:{port}"
        self.write()
