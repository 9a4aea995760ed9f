"""The real gate, failing each message's first attempt once its effects are published.

Its decision, delivery and records are stored, then the handler reports a failure, so the
input is not acked and comes back: as a gate that died between storing a message's effects
and acking it would see it again. Run as `support.flaky_gate:FirstTryFailsGate`.
"""

from __future__ import annotations

from collections.abc import Sequence

from actors.gate import GateActor
from bus import Context
from schemas import AnyEnvelope


class FirstTryFailsGate(GateActor):
    """A gate whose every first attempt fails after its effects went out."""

    async def handle_batch(
        self, batch: Sequence[tuple[AnyEnvelope, Context]]
    ) -> list[Exception | None]:
        results = await super().handle_batch(batch)
        return [
            result
            if result is not None or ctx.attempt > 1
            else RuntimeError("the first attempt fails after its effects (a test's fault)")
            for result, (_, ctx) in zip(results, batch, strict=True)
        ]
