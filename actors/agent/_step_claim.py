"""Who holds a wait's step: the handler asking the brain (a lease in the wait, renewed),
and the delivery whose handling stored the step.

Several handlers may reach one complete round at once (a fan-out's answers redelivered
together after a crash, on one replica or several); the one whose compare-and-set writes
`asking` into the wait asks the brain, the others wait for the claim to end. The claim holds
for one lease and is renewed every third of it while the brain answers, so a claimant that
died is taken over within one lease, not after the brain's whole time
(actors/agent/_delegating.py).

A step stored (the next round, or the answer) names the delivery that stored it
(`Wait.stepped_by`): that message is acked only once what the step sends is stored, so when it
comes back it is the one to send the step again.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import msgspec

from actors.delegation import Wait, WaitConflict, WaitStore
from bus import Context

__all__ = ("StepClaim", "delivery_of", "keep_renewed", "stored_the_step")


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


def delivery_of(ctx: Context) -> str:
    """The message in hand, as a wait's `stepped_by` names it: the same on every redelivery."""
    return f"{ctx.stream}:{ctx.stream_seq}"


def stored_the_step(wait: Wait, ctx: Context) -> bool:
    """Whether the message in hand stored the wait's step. A wait written before steps named
    their delivery names none: any redelivery may have, and sends the step again."""
    if not wait.stepped_by:
        return ctx.attempt > 1
    return wait.stepped_by == delivery_of(ctx)
