"""Keeping Python's cyclic garbage collector off a long-running actor's hot path."""

from __future__ import annotations

import gc

__all__ = ("collect_less",)

_YOUNG_COLLECTION_EVERY = 50_000
"""Allocations between collections of the youngest generation (Python's default: 700)."""


def collect_less() -> None:
    """Keep the cyclic garbage collector off the hot path of a long-running actor.

    An actor allocates a few short-lived objects per message and keeps large long-lived ones
    (the gate's record cache holds up to 200,000 records). With Python's default thresholds
    the collector runs every 700 allocations and keeps walking those records: a tenth of
    the gate's CPU per envelope with lazy fsync. What exists once the actor has started
    is moved out of the collector's sight, and young collections run less often; garbage
    cycles are still collected, later. Done once per process: several runtimes in one process
    (tests, benchmarks) would otherwise keep freezing each other's objects.
    """
    if gc.get_threshold()[0] >= _YOUNG_COLLECTION_EVERY:
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(_YOUNG_COLLECTION_EVERY, 20, 100)
