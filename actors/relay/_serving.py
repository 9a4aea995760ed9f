"""What a relay serves: the names whose deliveries it reads, and the durables it binds.

The relay reads `deliver.<name>` for each shared agent this deployment added (calls going
out) and for each device principal of a live share (answers going back to a remote caller).
Under least privilege the relay may not create those durables itself: the broker config
grants it exactly these names (`parley nats-config --relay-serves`) and the provisioner
creates their durables (`parley provision`), so both need the same list and the same consumer
definition the relay binds with; this module is where all three get them.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from actors.relay._keys import DeviceKeys
from actors.relay._shares import load_shared_agents, load_shares
from bus import Input
from schemas import Namespace

__all__ = ("relay_inputs", "served_names", "served_names_of")


def served_names(relay_dir: Path, device_id: str) -> tuple[str, ...]:
    """The shared agents added here and the principals of this device's live shares."""
    shared = {agent.name for agent in load_shared_agents(relay_dir)}
    principals = {s.principal for s in load_shares(relay_dir, device_id) if s.revoked_at is None}
    return tuple(sorted(shared | principals))


def served_names_of(relay_dir: Path, device_dir: Path) -> tuple[str, ...]:
    """`served_names` of the device whose keys `parley device init` wrote to `device_dir`.

    Raises:
        DeviceKeyError: the device keys are missing or unreadable.
    """
    return served_names(relay_dir, DeviceKeys.load(device_dir).device_id)


def relay_inputs(ns: Namespace, names: Iterable[str]) -> tuple[Input, ...]:
    """A deliver durable per served name. Never given up on (`max_deliver = -1`): a gateway
    outage must queue forwards, not drop them."""
    deliver = ns.stream("deliver")
    return tuple(Input(deliver, ns.deliver(name), name, "header", -1) for name in sorted(names))
