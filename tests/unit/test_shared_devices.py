"""Seed 000's `allowedSharedDeviceIds` names devices: the gate knows each shared agent's
device from the bundle's `shared_agent_devices`, and still accepts shared agents by name."""

from __future__ import annotations

from msgspec import structs

from actors.gate._decide import Allow
from actors.gate._plan import Deny
from schemas import ErrorCode
from tests.support.gatesim import GateSim, bundle, call

BOB = "b0" * 32
CAROL = "c0" * 32


def _sim(allowed: tuple[str, ...]) -> GateSim:
    caller = {
        "allowed_targets": ("bob-byte-doc", "carol-doc"),
        "start_traces": True,
        "allow_shared_agent_calls": True,
        "allowed_shared_device_ids": allowed,
    }
    policy = structs.replace(
        bundle(caller=caller),
        shared_agents=("bob-byte-doc", "carol-doc"),
        shared_agent_devices={"bob-byte-doc": BOB, "carol-doc": CAROL},
    )
    return GateSim(policy)


def test_a_shared_agent_on_an_allowed_device_is_reached() -> None:
    sim = _sim((BOB,))
    assert isinstance(sim.submit("caller", call("bob-byte-doc")), Allow)
    refused = sim.submit("caller", call("carol-doc"))
    assert isinstance(refused, Deny) and refused.code == ErrorCode.TARGET_NOT_ALLOWED
    assert "on device c0c0c0c0c0c0c0c0" in refused.message


def test_a_shared_agent_may_still_be_allowed_by_name() -> None:
    sim = _sim(("carol-doc",))
    assert isinstance(sim.submit("caller", call("carol-doc")), Allow)
    assert isinstance(sim.submit("caller", call("bob-byte-doc")), Deny)
