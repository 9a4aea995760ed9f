"""What both chaos checkers judge alike (tools/chaos/_checker.py, tools/chaos/_shared_check.py):
whether the load held for the whole run, how soon the system moved after each fault, and the
table a verdict is printed in.

A run's promises (nothing lost, every session ended, ...) hold trivially of a system that
carries no load: faults that hit an idle system prove nothing. So a verdict requires the load
to have gone on through every fault: the run is cut at its faults (each at the moment it was
healed) into windows, from each fault to the next and from the last one to the end of the
load (the whole load when there was no fault), and in each window the load must have been
at work: a session started in it (its first event stored), or one started earlier was still
open in it (it ended in or after the window, or never). A window with neither is a
violation: the load stopped, or the system stopped taking it, and either way the run did not
show what its verdict claims. Counting sessions in flight matters after a fault that slows
every session down (a cluster electing a new leader): each worker is then busy with one long
session, starts none for seconds, and the load has not stopped.

A window is never shorter than `min_window_s`, the time the system is allowed to move again
after a fault (the ack wait plus 5 s, the main run's recovery bound): a fault healed while
its process was still starting, followed a second later by the next, leaves a window in which
every session is rightly still waiting. Such a window is judged together with the next one
(the last one with the one before it; a lone window is stretched to the bound past the end
of the load, since a session submitted before its end starts once the system moved again).

The refusals the load generator got back (`RATE_LIMITED`, any error answer) are counted and
shown beside the windows: they say why a load stopped.

Pure: facts in, verdict out, tested on hand-made histories.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Protocol

__all__ = ("LoadCheck", "check_load", "recoveries", "verdict_table")


class _Timed(Protocol):
    @property
    def at(self) -> float: ...


@dataclass(frozen=True, slots=True)
class LoadCheck:
    """Whether sessions kept starting through a run's faults, and what the load was refused."""

    load_from: float
    """When the load started (Unix seconds): windows are shown relative to it."""
    windows: tuple[tuple[float, float], ...]
    """(from, to) of each fault window, Unix seconds."""
    idle: tuple[tuple[float, float], ...]
    """The windows in which no session started and none was open."""
    refusals: dict[str, int] = field(default_factory=dict)
    """Error answers the load generator got back, by code."""

    def violations(self) -> list[str]:
        if not self.idle:
            return []
        spans = ", ".join(self._span(window) for window in self.idle[:5])
        more = " …" if len(self.idle) > 5 else ""
        return [
            f"{len(self.idle)} of {len(self.windows)} fault window(s) with no session "
            f"started or open ({spans}{more}): the load stopped"
        ]

    def rows(self) -> list[tuple[str, str]]:
        """The table's rows: windows with a session started, and the refusals by code."""
        started = len(self.windows) - len(self.idle)
        refused = sum(self.refusals.values())
        by_code = ", ".join(f"{code}: {n}" for code, n in sorted(self.refusals.items()))
        return [
            ("fault windows with sessions at work", f"{started} of {len(self.windows)}"),
            (
                "refused (error answers to the load)",
                f"{refused}" + (f" ({by_code})" if refused else ""),
            ),
        ]

    def _span(self, window: tuple[float, float]) -> str:
        start, end = window
        return f"{start - self.load_from:.1f}-{end - self.load_from:.1f} s"


def check_load(
    faults: Sequence[_Timed],
    sessions: Iterable[tuple[float, float | None]],
    load_from: float,
    load_until: float,
    refusals: Mapping[str, int] | None = None,
    *,
    min_window_s: float = 0.0,
) -> LoadCheck:
    """Cut the load's span at the faults and find the windows the load was not at work in.

    Args:
        faults: the run's faults; `at` is when each was healed (Unix seconds).
        sessions: when each session started (its first event stored) and ended (None: never).
        load_from: when the load generator started.
        load_until: when it stopped opening sessions (the run's duration is over).
        refusals: error answers the load generator got back, by code.
        min_window_s: the shortest window; a shorter one is judged with the next.
    """
    cuts = sorted(fault.at for fault in faults if load_from <= fault.at < load_until)
    bounds = [*cuts, load_until] if cuts else [load_from, load_until]
    kept = bounds[:1]
    for bound in bounds[1:]:
        if bound - kept[-1] >= min_window_s or bound == bounds[-1]:
            kept.append(bound)
    if len(kept) > 2 and kept[-1] - kept[-2] < min_window_s:
        del kept[-2]  # the last window is too short: it joins the one before it
    elif kept[-1] - kept[-2] < min_window_s:
        kept[-1] = kept[-2] + min_window_s  # the only one: a session submitted before the
        # load's end may start once the system moved again, up to the bound
    windows = tuple(pairwise(kept))
    spans = [(began, float("inf") if ended is None else ended) for began, ended in sessions]
    idle = tuple(
        (start, end)
        for start, end in windows
        if not any(began < end and ended >= start for began, ended in spans)
    )
    return LoadCheck(load_from, windows, idle, dict(refusals or {}))


def recoveries(faults: Sequence[_Timed], end_to_end: Iterable[float]) -> tuple[float | None, ...]:
    """For each fault, seconds until the first end-to-end message after it (None: never)."""
    times = sorted(end_to_end)
    out: list[float | None] = []
    for fault in faults:
        after = next((t for t in times if t > fault.at), None)
        out.append(None if after is None else after - fault.at)
    return tuple(out)


def verdict_table(
    rows: Sequence[tuple[str, str]], seed: int | None, violations: Sequence[str]
) -> list[str]:
    """A run's table: its rows aligned, the seed that replays it, and the verdict."""
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    if seed is not None:
        lines.append(f"{'seed':<{width}}  {seed}")
    verdict = "PASS" if not violations else "FAIL: " + "; ".join(violations)
    lines.append(f"{'verdict':<{width}}  {verdict}")
    return lines
