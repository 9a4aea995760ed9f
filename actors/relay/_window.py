"""The replay window of one (sender device, session): which sequence numbers were accepted.

The gateway is untrusted and may replay or reorder frames. Like IPsec's anti-replay window, a
receiver keeps the highest sequence number it accepted and a bitmap of the `WIDTH` numbers
below it: a number already marked is a replay, one below the window is too old to tell and is
refused, anything else is accepted (so the gateway may reorder within the window without a
loss). Pure transitions; the relay persists the window in its KV bucket with compare-and-set.
"""

from __future__ import annotations

from msgspec import Struct

__all__ = ("WIDTH", "ReplayRefused", "ReplayWindow", "accept")

WIDTH = 64


class ReplayRefused(ValueError):
    """`reason`: `replay` (seen before) or `too_old` (below the window)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ReplayWindow(Struct, frozen=True, kw_only=True):
    highest: int = 0
    seen: int = 0
    """Bit i set: `highest - i` was accepted (bit 0 is `highest` itself)."""


def accept(window: ReplayWindow, seq: int) -> ReplayWindow:
    """The window after accepting `seq`; `ReplayRefused` if it must be refused."""
    if seq < 1:
        raise ReplayRefused("too_old", f"sequence number {seq} is not positive")
    if seq > window.highest:
        shift = seq - window.highest
        seen = ((window.seen << shift) | 1) & ((1 << WIDTH) - 1) if shift < WIDTH else 1
        return ReplayWindow(highest=seq, seen=seen)
    offset = window.highest - seq
    if offset >= WIDTH:
        raise ReplayRefused(
            "too_old", f"sequence number {seq} is below the window ({window.highest} - {WIDTH})"
        )
    if window.seen >> offset & 1:
        raise ReplayRefused("replay", f"sequence number {seq} was already accepted")
    return ReplayWindow(highest=window.highest, seen=window.seen | (1 << offset))
