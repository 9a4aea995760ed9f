"""How long a tool request may still start: the gate takes its sender's `Parley-Deadline` only
to shorten the chain's (actors/gate/_checks.py), and the router moves a call's deadline past a
held approval only to a turn after its expiry, never earlier (actors/router/_approval_wait.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from actors.gate._decide import Allow
from actors.gate._plan import Deny
from actors.router._approval_wait import extended_deadline
from actors.router._session import Limits
from bus import DEADLINE
from schemas import Capability, ToolRequest, new_id, utc_now
from tests.support.gatesim import NOW, NOW_MS, GateSim, bundle, call, delegation, human

_READER: dict[str, Any] = {
    "allowed_targets": ("router", "tools"),
    "capabilities": ("File.Read",),
    "scopes": (Capability(name="File.Read", allowed_paths=(".",)),),
}
PROFILES: dict[str, dict[str, Any]] = {
    "cli": {"start_traces": True, "speaks_for_person": True, "allowed_targets": ("router",)},
    "router": {"start_traces": True, "allowed_targets": ("prime",)},
    "prime": {**_READER, "allowed_targets": ("router", "tools", "byte")},
    "byte": {**_READER, "allowed_targets": ("prime", "tools")},
    "tools": {},
}


def _ok(outcome: Allow | Deny) -> Allow:
    assert isinstance(outcome, Allow), outcome
    return outcome


def _read(claim: str) -> ToolRequest:
    return ToolRequest(
        id=new_id(),
        created_at=utc_now(),
        tool_name="File.Read",
        arguments={"path": f"notes-{claim}.txt"},  # two identical requests: one repeated
        session_id="s",
        task_id="t",
        step_id="st",
    )


def _delivered_deadline(sender: str, cause: str, sim: GateSim, claim: str) -> int | None:
    allowed = _ok(sim.submit(sender, _read(claim), cause=cause, claims={DEADLINE: claim}))
    return allowed.route.position.levels[-1].deadline_ms


def _prime_called(sim: GateSim) -> str:
    root = human()
    _ok(sim.submit("cli", root))
    first = call("prime")
    _ok(sim.submit("router", first, cause=root.id))
    return first.id


def test_a_tool_request_claims_how_long_its_sender_waits() -> None:
    sim = GateSim(bundle(**PROFILES))
    cause = _prime_called(sim)  # the router's call: no deadline of the chain's
    assert _delivered_deadline("prime", cause, sim, str(NOW_MS + 3000)) == NOW_MS + 3000
    assert _delivered_deadline("prime", cause, sim, "soon") is None  # no count, no claim


def test_a_claim_never_lengthens_the_chains_deadline() -> None:
    sim = GateSim(bundle(**PROFILES))
    to_byte = delegation("prime", "byte", deadline_ms=5000, user_id="")
    _ok(sim.submit("prime", to_byte, cause=_prime_called(sim)))
    chain = NOW_MS + 5000
    assert _delivered_deadline("byte", to_byte.id, sim, str(NOW_MS + 60_000)) == chain
    assert _delivered_deadline("byte", to_byte.id, sim, str(NOW_MS + 1000)) == NOW_MS + 1000


def test_a_held_approval_moves_a_deadline_only_later() -> None:
    limits = Limits(turn_timeout_s=60)
    expiry = NOW + timedelta(seconds=300)
    assert extended_deadline(NOW, expiry, limits) == expiry + timedelta(seconds=60)
    assert extended_deadline(None, expiry, limits) == expiry + timedelta(seconds=60)
    assert extended_deadline(expiry + timedelta(seconds=90), expiry, limits) is None
