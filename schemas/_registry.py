"""What actors write to the registry KV bucket: who is alive, since when, as what."""

from __future__ import annotations

from msgspec import Struct

from schemas._envelopes import UtcTime

__all__ = ("ActorHeartbeat", "heartbeat_key")


class ActorHeartbeat(Struct, frozen=True, kw_only=True):
    """Written under `heartbeat.<actor_id>` when an actor starts and every few seconds after.

    A reader decides liveness from `beat_at` and `period_s` (three missed beats: down).
    """

    actor_id: str
    kind: str
    pid: int
    started_at: UtcTime
    beat_at: UtcTime
    period_s: float
    inputs: tuple[str, ...] = ()


def heartbeat_key(actor_id: str) -> str:
    """The registry key of an actor's heartbeat."""
    return f"heartbeat.{actor_id}"
