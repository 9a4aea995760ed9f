"""A test actor run as a real process (`parley run support.probe:ProbeActor`).

What it does depends on the text of the human message it is delivered, so a test can ask it to
misbehave in one precise way:

- any text: submit an `effect` envelope whose id derives from the message (so a redelivery
  re-publishes the same id), and then a `done` envelope recording the delivery attempt and
  the pid of the process that handled it;
- `hang-after-effect`: on the first delivery, wait until the effect is stored, then never
  finish (as a slow LLM call would), so the test can SIGKILL it between effect and ack;
- `fail`: raise, so the runtime retries and finally dead-letters it;
- `crash`: exit the process at once, on every delivery;
- `fail-fail-hang`: raise on the first two deliveries (clean failures, as a KV read timing
  out during an election), then on the third submit the effect and hang, so the test can
  SIGKILL it there;
- `slow:SECONDS`: take that long before the effect, as a long LLM call would.

`StallingProbe` handles messages concurrently, as the auditor and the router do, and
`stall:BLOCK:WORK` kills its process on the first two deliveries (so the third is guarded by
the quarantine's mark), then on the third blocks the whole process
for BLOCK seconds (CPU starvation: no heartbeat goes out, so JetStream redelivers it while it
is still in hand) and works WORK seconds more before finishing.

`ReminderProbe` also reads its reminders (`parley.timers.<id>`): `remind:N` defers itself
(0.1 s, logging "deferred a reminder" with the attempt) until its N-th delivery, then submits
the effect.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Sequence
from typing import ClassVar

from bus import Actor, Context, Input
from schemas import AgentResponse, AnyEnvelope, HumanMessage, Reply, utc_now


class ProbeActor(Actor):
    kind: ClassVar[str] = "probe"

    def _response(self, ctx: Context, purpose: str, text: str) -> AgentResponse:
        return AgentResponse(
            id=ctx.derive_id(purpose),
            created_at=utc_now(),
            sender=self.actor_id,
            text=text,
            call_id=ctx.envelope_id,
            reply=Reply(message=text or purpose),
            attempt=ctx.attempt,
        )

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        if not isinstance(envelope, HumanMessage):
            return
        if envelope.text == "crash":
            os._exit(70)
        if envelope.text == "fail":
            raise RuntimeError("asked to fail")
        if envelope.text == "fail-fail-hang" and ctx.attempt < 3:
            raise RuntimeError("asked to fail twice")
        if envelope.text.startswith("slow:"):
            await asyncio.sleep(float(envelope.text.removeprefix("slow:")))  # simulated work
        await ctx.submit(self._response(ctx, "effect", envelope.text))
        if (envelope.text, ctx.attempt) in {("hang-after-effect", 1), ("fail-fail-hang", 3)}:
            await ctx.outbox.settle(5.0)
            await asyncio.Event().wait()  # never set: the test kills this process here
        # `done` names the process that finished the work, so a test can tell a redelivery to
        # a restarted process from one inside the same process.
        await ctx.submit(self._response(ctx, "done", f"{envelope.text}@{os.getpid()}"))


class StallingProbe(ProbeActor):
    kind: ClassVar[str] = "stalling-probe"
    concurrent_handlers: ClassVar[bool] = True

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        if isinstance(envelope, HumanMessage) and envelope.text.startswith("stall:"):
            block, work = (float(part) for part in envelope.text.split(":")[1:3])
            if ctx.attempt < 3:
                os._exit(70)  # two deaths: the third delivery is handled under the mark
            if ctx.attempt == 3:
                time.sleep(block)  # noqa: ASYNC251 - the fault injected: a starved event loop
                await asyncio.sleep(work)  # simulated work, during which it comes back
        await super().handle(envelope, ctx)


class ReminderProbe(ProbeActor):
    kind: ClassVar[str] = "reminder-probe"

    def inputs(self) -> Sequence[Input]:
        return (*super().inputs(), Input.timers(self.namespace, self.actor_id))

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        if not (isinstance(envelope, HumanMessage) and envelope.text.startswith("remind:")):
            await super().handle(envelope, ctx)
            return
        if ctx.attempt < int(envelope.text.removeprefix("remind:")):
            logging.getLogger("parley.test.probe").info(
                "deferred a reminder", extra={"attempt": ctx.attempt}
            )
            ctx.defer(0.1)
            return
        await ctx.submit(self._response(ctx, "effect", envelope.text))
