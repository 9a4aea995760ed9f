"""What actors write to the registry KV bucket: who is alive, since when, as what."""

from __future__ import annotations

from msgspec import Struct

from schemas._base import UtcTime

__all__ = ("ActorHeartbeat", "ProfileSummary", "heartbeat_key", "profile_key")


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


class ProfileSummary(Struct, frozen=True, kw_only=True):
    """Written under `profile.<name>` by an agent host when it starts.

    What the router and the gate need to know about an agent without reading its profile
    file: which backend and model answer for it, what it may do (capabilities, tools,
    sub-agent calls) and which version of the profile is running. Liveness is the
    heartbeat's business (`heartbeat.<actor_id>`), not this record's.
    """

    name: str
    actor_id: str
    kind: str = "agent"
    backend: str
    model: str = ""
    description: str = ""
    version: str = "1"
    capabilities: tuple[str, ...] = ()
    tools_allowed: tuple[str, ...] = ()
    allow_sub_agent_calls: bool = False
    peers: tuple[str, ...] = ()
    device_id: str = ""
    """For a shared agent (kind `shared_agent`, written by the relay that hosts it here): the
    id of the device it lives on, which the audit names as seed 000's target device."""
    written_at: UtcTime


def profile_key(name: str) -> str:
    """The registry key of an agent profile's summary."""
    return f"profile.{name}"
