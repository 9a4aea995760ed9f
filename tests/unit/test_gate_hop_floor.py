"""Seed 000's maxHopCount across deployments: a relay names the calling side's hop count on
the root it submits, and the gate takes it as a floor (max(own record, claim)). A claim can
only make a chain stricter; below the floor the gate trusts its own records, not claims."""

from __future__ import annotations

from actors.gate._decide import Allow
from actors.gate._plan import Deny
from bus import HOP_COUNT
from schemas import ErrorCode
from tests.support.gatesim import GateSim, bundle, call, response

DEVICE = {"start_traces": True, "allowed_targets": ("doc",), "max_hop_count": 2}
DOC = {"allowed_targets": ("helper",), "max_hop_count": 2}


def _sim() -> GateSim:
    return GateSim(bundle(device=DEVICE, doc=DOC, helper={}))


def test_a_root_claiming_a_hop_over_the_limit_is_refused() -> None:
    refused = _sim().submit("device", call("doc"), claims={HOP_COUNT: "3"})
    assert isinstance(refused, Deny), refused
    assert (refused.code, refused.rule) == (ErrorCode.HOP_LIMIT_EXCEEDED, "max_hop_count")
    assert (refused.limit, refused.value) == (2, 3)
    assert "Hop count 3 exceeds maxHopCount 2" in refused.message


def test_a_claimed_hop_carries_on_down_the_chain() -> None:
    sim = _sim()
    first = call("doc")
    assert isinstance(sim.submit("device", first, claims={HOP_COUNT: "2"}), Allow)
    assert sim.position(first.id).hop == 2  # the calling side's count, not a fresh 1
    onward = sim.submit("doc", call("helper"), cause=first.id)
    assert isinstance(onward, Deny) and onward.code == ErrorCode.HOP_LIMIT_EXCEEDED
    assert onward.value == 3
    # the answer goes back one hop shallower than the call it answers, floor and all
    answer = response("doc", target="device")
    assert isinstance(sim.submit("doc", answer, cause=first.id), Allow)
    assert sim.position(answer.id).hop == 1


def test_a_root_claiming_a_low_hop_gets_its_own_record() -> None:
    sim = _sim()
    unclaimed = call("doc")
    assert isinstance(sim.submit("device", unclaimed), Allow)
    claimed = call("doc", goal="other")
    assert isinstance(sim.submit("device", claimed, claims={HOP_COUNT: "1"}), Allow)
    assert sim.position(unclaimed.id).hop == sim.position(claimed.id).hop == 1
    # a claim below the root's own hop is a forgery, as before: it lowers nothing
    zero = sim.submit("device", call("doc", goal="third"), claims={HOP_COUNT: "0"})
    assert isinstance(zero, Deny) and zero.code == ErrorCode.FORGED_HEADER


def test_a_claimed_low_hop_on_a_non_root_never_lowers_the_record() -> None:
    sim = _sim()
    first = call("doc")
    assert isinstance(sim.submit("device", first, claims={HOP_COUNT: "2"}), Allow)
    for low in ("0", "1", "2"):
        lower = sim.submit("doc", call("helper"), cause=first.id, claims={HOP_COUNT: low})
        assert isinstance(lower, Deny) and lower.code == ErrorCode.FORGED_HEADER, low
    assert sim.position(first.id).hop == 2
    onward = sim.submit("doc", call("helper"), cause=first.id, claims={HOP_COUNT: "3"})
    assert isinstance(onward, Deny) and onward.code == ErrorCode.HOP_LIMIT_EXCEEDED


def test_a_claim_that_is_not_a_count_is_no_floor() -> None:
    for bad in ("-1", "1.5", "\uff13", "9" * 40):
        refused = _sim().submit("device", call("doc"), claims={HOP_COUNT: bad})
        assert isinstance(refused, Deny) and refused.code == ErrorCode.FORGED_HEADER, bad
