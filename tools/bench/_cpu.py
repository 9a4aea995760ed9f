"""CPU time of the processes a benchmark started, read from /proc.

What a row's path costs the machine, beside how long it takes: on two cores a path whose
processes need more CPU per call than the call's own duration waits for a core, so the CPU
per call bounds its latency from below. Counted for every descendant of this process (the
nats-server, the actors, the raw path's roles), split into the server's share and the rest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ("CpuSample", "Descendants")

_TICK_S = 1 / os.sysconf("SC_CLK_TCK")
_SERVER = "nats-server"


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds (user and system) used so far by the server and by the other processes."""

    server_s: float = 0.0
    others_s: float = 0.0

    def __sub__(self, earlier: CpuSample) -> CpuSample:
        return CpuSample(self.server_s - earlier.server_s, self.others_s - earlier.others_s)

    def __add__(self, other: CpuSample) -> CpuSample:
        return CpuSample(self.server_s + other.server_s, self.others_s + other.others_s)


def _stat(pid: int) -> tuple[int, str, float] | None:
    """(parent pid, command name, CPU seconds) of a process, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()  # from the state field on
    return int(fields[1]), name, (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime


class Descendants:
    """The processes descended from this one when it was made (the server, the actors, the
    raw roles), whose CPU it samples; made once the processes of a row are up."""

    def __init__(self) -> None:
        stats = {
            int(e.name): _stat(int(e.name)) for e in Path("/proc").iterdir() if e.name.isdigit()
        }
        children: dict[int, list[int]] = {}
        for pid, stat in stats.items():
            if stat is not None:
                children.setdefault(stat[0], []).append(pid)
        self._pids: list[int] = []
        pending = [os.getpid()]
        while pending:
            found = children.get(pending.pop(), [])
            self._pids += found
            pending += found

    def cpu(self) -> CpuSample:
        """CPU used so far by those of the processes still running."""
        sample = CpuSample()
        for pid in self._pids:
            stat = _stat(pid)
            if stat is not None:
                _, name, cpu_s = stat
                server = name == _SERVER
                sample += CpuSample(cpu_s if server else 0.0, 0.0 if server else cpu_s)
        return sample
