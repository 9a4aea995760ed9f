"""The shared-agent relay (seed 000's transport): devices, shares, sealed frames, the actor.

`RelayActor` (`parley run relay`) bridges this deployment and a remote one over an untrusted
gateway nats-server; `seal_frame`/`open_frame` sign then HPKE-encrypt one frame; the replay
window refuses repeats; `DeviceKeys` and the share files are what `parley device` and
`parley share` write. docs/relay.md walks through a call end to end.
"""

from actors.relay._actor import RelayActor
from actors.relay._gateway import Gateway, frame_msg_id, gateway_stream
from actors.relay._keys import DeviceKeyError, DeviceKeys
from actors.relay._sealing import (
    FrameError,
    frame_devices,
    open_frame,
    seal_frame,
)
from actors.relay._serving import relay_inputs, served_names, served_names_of
from actors.relay._shares import (
    ShareRefused,
    find_share,
    load_shared_agents,
    load_shares,
    read_share,
    save_shared_agent,
    share_path,
    write_share,
)
from actors.relay._translate import owner_call_id
from actors.relay._window import WIDTH, ReplayRefused, ReplayWindow, accept

__all__ = (
    "WIDTH",
    "DeviceKeyError",
    "DeviceKeys",
    "FrameError",
    "Gateway",
    "RelayActor",
    "ReplayRefused",
    "ReplayWindow",
    "ShareRefused",
    "accept",
    "find_share",
    "frame_devices",
    "frame_msg_id",
    "gateway_stream",
    "load_shared_agents",
    "load_shares",
    "open_frame",
    "owner_call_id",
    "read_share",
    "relay_inputs",
    "save_shared_agent",
    "seal_frame",
    "served_names",
    "served_names_of",
    "share_path",
    "write_share",
)
