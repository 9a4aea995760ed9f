"""A test actor with a raw input on PARLEY_DEAD (`parley run support.deadreader:DeadReader`).

It logs each dead letter it is handed (bytes and headers as stored) and fails, every time,
on a payload that contains `fail`, so a test can watch the runtime give up on a dead letter
without dead-lettering it again.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import ClassVar

from bus import DEAD_REASON, Actor, Context, Input
from schemas import AnyEnvelope

log = logging.getLogger("parley.test.deadreader")


class DeadReader(Actor):
    kind: ClassVar[str] = "deadreader"

    def inputs(self) -> Sequence[Input]:
        ns = self.namespace
        return (Input(ns.stream("dead"), ns.wildcard("dead"), self.actor_id, raw=True),)

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        raise AssertionError("a raw input never hands over an envelope")

    async def handle_raw(self, ctx: Context) -> None:
        if b"fail" in ctx.payload:
            raise RuntimeError("asked to fail")
        log.info(
            "raw message",
            extra={
                "subject": ctx.subject,
                "seq": ctx.stream_seq,
                "sha256": hashlib.sha256(ctx.payload).hexdigest(),
                "reason": ctx.headers.get(DEAD_REASON, ""),
                "id": ctx.envelope_id,
            },
        )
