"""A handler's claim on a wait's step while it asks the brain: a lease in the wait, renewed.

Several handlers may reach one complete round at once (a fan-out's answers redelivered
together after a crash, on one replica or several); the one whose compare-and-set writes
`asking` into the wait asks the brain, the others wait for the claim to end. The claim holds
for one lease and is renewed every third of it while the brain answers, so a claimant that
died is taken over within one lease, not after the brain's whole time
(actors/agent/_delegating.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import msgspec

from actors.delegation import Wait, WaitConflict, WaitStore

__all__ = ("StepClaim", "keep_renewed")


@dataclass(slots=True)
class StepClaim:
    """A step claimed to ask the brain: the wait as last written, and its revision."""

    wait: Wait
    revision: int
    done: asyncio.Event
    """Set once the brain answered: the renewals stop."""


async def keep_renewed(claim: StepClaim, store: WaitStore, lease_ms: int) -> None:
    """Renew `claim` every third of its lease until the brain answered (`claim.done`), or
    another handler took the step over (its answer will then lose its compare-and-set)."""
    while True:
        try:
            await asyncio.wait_for(claim.done.wait(), lease_ms / 3000)
            return  # the brain answered
        except TimeoutError:
            pass
        now_ms = int(time.time() * 1000)
        renewed = msgspec.structs.replace(claim.wait, asking_until_ms=now_ms + lease_ms)
        try:
            claim.revision = await store.update(renewed, claim.revision)
        except WaitConflict:
            return
        claim.wait = renewed
