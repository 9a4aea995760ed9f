"""The actor runtime: everything between the consumer loop and `Actor.handle()`.

For each fetched batch: read each message's JetStream metadata, decode the envelope and
headers (the only place bytes become Structs), build the context, run the handlers under their
trace ids (in order, or concurrently for actors that declare `concurrent_handlers`), settle
every effect of the batch in one wait, then ack each message whose effects were all stored.
Bad input is dead-lettered at once and acked, so it can neither crash the actor nor block the
messages behind it; a failing handler is retried with backoff and dead-lettered on its last
delivery. A raw input (`Input.raw`) is not decoded at all: its messages go to
`Actor.handle_raw()` as bytes, with the same retries, settling and acks.

A redelivered input is handled alone, under the quarantine's mark (bus/_quarantine.py), so an
input that killed the process twice is dead-lettered instead of taking the next replica down.
Turning messages into jobs is bus/_intake.py; retries, dead letters and what is never
dead-lettered again are bus/_failures.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from bus import _tracing
from bus._ackinbox import AckInbox, PublishStalled
from bus._actor import Actor, BusHandle, Input
from bus._connection import Link, Uptime, connect_when_up, drain, jetstream
from bus._consumer import ConsumerLoop
from bus._deadletter import dead_letters_for, watch_exhausted
from bus._failures import Failures
from bus._fastbatch import FastBatcher
from bus._gc import collect_less
from bus._heartbeat import Heartbeat
from bus._intake import BadInput, Intake, Job
from bus._logging import trace_scope
from bus._metrics import ActorMetrics
from bus._outbox import settle, wait_all
from bus._provision import provision_for
from bus._quarantine import Quarantine, Settled, alert_possible_death
from bus._refusals import ConnectionRefusals
from bus._traced import Batch, batch_traced, handle_traced
from schemas import Namespace

__all__ = ("ActorRuntime",)

log = logging.getLogger("parley.bus.runtime")


async def _wait_all(events: list[asyncio.Event]) -> None:
    for event in events:
        await event.wait()


def _ack_failure(
    item: asyncio.Future[None] | BaseException, late: set[asyncio.Future[None]]
) -> BaseException | None:
    if isinstance(item, BaseException):
        return item
    if item in late:
        return TimeoutError("the server did not confirm the ack in time")
    return item.exception()


class ActorRuntime:
    """Runs one actor on one connection until `stopping` is set."""

    def __init__(self, actor: Actor, metrics: ActorMetrics) -> None:
        self.actor = actor
        self.settings = actor.settings
        self.metrics = metrics
        self.namespace = Namespace(self.settings.namespace)
        self.ready = asyncio.Event()
        self._nc: NATS | None = None
        self._js: JetStreamContext | None = None
        self._link = Link()  # the connection's state: no pull request waits in a buffer
        self._intake = Intake(actor.actor_id, self.namespace, self.settings)
        self._failures: Failures | None = None
        self._inbox: AckInbox | None = None
        self._batcher: FastBatcher | None = None
        self._quarantine: Quarantine | None = None
        # Deliveries nacked here: no deaths (bus/_quarantine.py).
        self._settled = Settled(guarded_from=self.settings.poison_deaths)
        self._in_hand: dict[tuple[str, int], float] = {}
        """Guarded messages this process is handling now, by (stream, seq): when each began."""
        self._latency = metrics.handler_seconds.labels(actor.actor_id)
        self._possible_deaths = metrics.possible_deaths
        self._published = metrics.published.labels(actor.actor_id)
        self._dead_stream = self.namespace.stream("dead")
        self._outcomes = {
            outcome: metrics.handled.labels(actor.actor_id, outcome)
            for outcome in ("acked", "nacked", "dead_lettered", "deferred", "abandoned")
        }

    async def run(self, stopping: asyncio.Event) -> None:
        """Connect, provision, start the actor and its consumers; drain on `stopping`."""
        settings = self.settings
        actor_id = self.actor.actor_id
        async with AsyncExitStack() as stack:
            uptime = Uptime()
            refusals = ConnectionRefusals()
            nc = await connect_when_up(
                settings, actor_id, self.metrics, uptime, stopping, self._link, refusals.note
            )
            if nc is None:
                return  # stopped while waiting for an unreachable server
            stack.push_async_callback(drain, nc)
            js = jetstream(nc, settings)
            self._nc, self._js = nc, js
            self._inbox = AckInbox(nc, link=self._link)
            await self._inbox.open()
            self._batcher = FastBatcher(nc, self._inbox)
            await self._batcher.open()
            if settings.provision:
                await provision_for(js, self.namespace, settings)
            dead = dead_letters_for(
                js,
                self.namespace,
                actor_id,
                settings,
                self.metrics,
                by_sender=self.actor.files_by_sender,
            )
            failed = (self._intake, self._inbox, dead, self._dead_stream, self._outcomes)
            self._failures = Failures(self.actor, *failed, self._settled)
            quarantine = Quarantine(js, self.namespace, actor_id, settings.marks_bucket)
            self._quarantine = quarantine
            handle = BusHandle(
                nc, js, self.namespace, settings, self.metrics, uptime, self._link, refusals
            )
            await self.actor.start(handle)
            stack.push_async_callback(self.actor.stop)
            collect_less()
            loops = [self._loop_for(spec, js) for spec in self.actor.inputs()]
            heartbeat = Heartbeat(
                js,
                self.namespace,
                actor_id,
                self.actor.kind,
                settings.heartbeat_s,
                [spec.filter_subject for spec in self.actor.inputs()],
                uptime,
            )
            await heartbeat.beat()
            await watch_exhausted(
                nc,
                dead,
                self.namespace,
                settings,
                [(lp.spec.stream, lp.spec.durable) for lp in loops],
            )
            readies = [asyncio.Event() for _ in loops]
            async with asyncio.TaskGroup() as tasks:
                for loop, ready in zip(loops, readies, strict=True):
                    tasks.create_task(loop.run(stopping, ready))
                tasks.create_task(heartbeat.run(stopping))
                tasks.create_task(self.actor.background(stopping))
                all_ready = tasks.create_task(_wait_all(readies))
                stop_wait = tasks.create_task(stopping.wait())
                await asyncio.wait({all_ready, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if all_ready.done():
                    await nc.flush()
                    self.ready.set()
                    log.info(
                        "ready", extra={"inputs": [s.filter_subject for s in self.actor.inputs()]}
                    )
                all_ready.cancel()
            await quarantine.hand_over(self._settled)  # stopped cleanly: for the next one

    def _loop_for(self, spec: Input, js: JetStreamContext) -> ConsumerLoop:
        async def process(messages: list[Msg], handled: asyncio.Event) -> None:
            await self._process_batch(spec, messages, handled)

        return ConsumerLoop(
            js,
            spec,
            self.settings,
            self.metrics,
            process,
            sequential=not self.actor.concurrent_handlers,
            settles_behind=self.actor.settles_behind,
            gathers_s=self.actor.gathers_s,
            link=self._link,
        )

    async def _handle(self, job: Job) -> Exception | None:
        if _tracing.tracer is not None and job.envelope is not None:
            return await handle_traced(self.actor, job.envelope, job.ctx)
        with trace_scope(job.ctx.trace_id):
            try:
                if job.envelope is None:
                    await self.actor.handle_raw(job.ctx)
                else:
                    await self.actor.handle(job.envelope, job.ctx)
            except Exception as exc:
                return exc
        return None

    async def _handle_batch(self, jobs: list[Job]) -> list[Exception | None]:
        batch = [(job.envelope, job.ctx) for job in jobs if job.envelope is not None]
        if len(batch) != len(jobs):
            raise RuntimeError("raw messages are never handled as a batch")
        if _tracing.tracer is None:
            return await self._handle_batch_untraced(jobs, batch)
        return await batch_traced(batch, lambda: self._handle_batch_untraced(jobs, batch))

    async def _handle_batch_untraced(self, jobs: list[Job], batch: Batch) -> list[Exception | None]:
        batches = self._batcher.begin() if self._batcher is not None else None
        for job in jobs:  # one fast batch per stream for their `publish_batched` effects
            job.ctx.outbox.batches = batches
        try:
            errors = await self.actor.handle_batch(batch)
        except Exception as exc:
            return [exc] * len(jobs)
        finally:
            if batches is not None:
                await batches.commit()
                for job in jobs:  # what a handler publishes later goes on its own
                    job.ctx.outbox.batches = None
        if len(errors) != len(jobs):
            failure = RuntimeError(f"handle_batch answered {len(errors)} of {len(jobs)} messages")
            return [failure] * len(jobs)
        return errors

    async def _process_batch(
        self, spec: Input, messages: list[Msg], handled: asyncio.Event | None = None
    ) -> None:
        """Handle a fetched batch: handlers, then all effects settled together, then acks.

        `handled` is set once the handlers have run, before the effects are settled.
        """
        started = time.perf_counter()
        inbox, failures = self._inbox, self._failures
        if inbox is None or failures is None:
            raise RuntimeError("message processed before the runtime connected")
        jobs: list[Job] = []
        again: list[Job] = []
        if self._quarantine is not None:
            await self._quarantine.recall(self._settled, spec.stream, messages)
        for msg in messages:
            try:
                job = self._intake.prepare(spec, msg, inbox)
            except BadInput as bad:
                await failures.reject(spec, msg, bad.reason, bad.detail)
                continue
            ctx = job.ctx
            deaths = self._settled.unexplained(spec.stream, ctx.stream_seq, ctx.attempt)
            if deaths:
                self._possible_deaths.labels(self.actor.actor_id, ctx.stream).inc()
                alert_possible_death(ctx, deaths, self.settings.poison_deaths)
            guarded = self._settled.guarded(spec.stream, ctx.stream_seq, ctx.attempt)
            (again if guarded else jobs).append(job)
        if self.actor.concurrent_handlers and again:
            # Handlers that wait on slow things (an LLM call) are not made to wait for each
            # other: each redelivery runs under its own mark beside the rest of the batch.
            fresh = [self._run_jobs(failures, inbox, spec, jobs, handled, started)] if jobs else []
            await asyncio.gather(
                *(self._guarded(failures, inbox, spec, job) for job in again), *fresh
            )
            return
        for job in again:  # redeliveries first (they are older), each alone under its mark
            await self._guarded(failures, inbox, spec, job)
        if jobs:
            await self._run_jobs(failures, inbox, spec, jobs, handled, started)

    async def _guarded(self, failures: Failures, inbox: AckInbox, spec: Input, job: Job) -> None:
        """Handle a redelivered message alone, marked as in hand (bus/_quarantine.py), or
        quarantine it when an earlier delivery died while handling it.

        A mark left by an attempt this very process is still running, and still vouches for
        (within `max_handler_s`), is no death: the message came back only because this
        process was too busy to tell JetStream it was in progress (a loaded machine, a short
        ack wait). That redelivery is left alone, neither handled nor acked: the attempt in
        hand settles the message.
        """
        quarantine, ctx = self._quarantine, job.ctx
        if quarantine is None or spec.stream == self._dead_stream:
            await self._run_jobs(failures, inbox, spec, [job], None, time.perf_counter())
            return
        key = (spec.stream, ctx.stream_seq)
        began = self._in_hand.get(key)
        if began is not None and time.monotonic() - began < self.settings.max_handler_s:
            log.warning(
                "a redelivery of a message this process is still handling: left to that attempt",
                extra={"seq": ctx.stream_seq, "attempt": ctx.attempt},
            )
            return
        self._in_hand[key] = time.monotonic()  # before the mark: a redelivery may come meanwhile
        try:
            died = await quarantine.begin(spec.stream, ctx.stream_seq, ctx.attempt)
            if died is not None:
                detail = (
                    f"delivery {died} of {ctx.attempt} died while being handled (the process "
                    "crashed or hung): quarantined instead of handed to another replica"
                )
                log.error("quarantined a message", extra={"seq": ctx.stream_seq, "detail": detail})
                await failures.reject(spec, job.msg, "quarantined", detail)
                await quarantine.end(spec.stream, ctx.stream_seq)
                return

            async def settled() -> None:
                await quarantine.end(spec.stream, ctx.stream_seq)

            started = time.perf_counter()
            await self._run_jobs(failures, inbox, spec, [job], None, started, settled)
        finally:
            self._in_hand.pop(key, None)

    async def _run_jobs(
        self,
        failures: Failures,
        inbox: AckInbox,
        spec: Input,
        jobs: list[Job],
        handled: asyncio.Event | None,
        started: float,
        settled: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Run the handlers of `jobs`, settle their effects, then ack (or retry) each;
        `settled` runs once the effects are settled, before any ack or nak."""
        if self.actor.handles_batches and not spec.raw:
            errors = await self._handle_batch(jobs)
        elif self.actor.concurrent_handlers and len(jobs) > 1:
            errors = list(await asyncio.gather(*(self._handle(job) for job in jobs)))
        else:
            errors = [await self._handle(job) for job in jobs]
        if handled is not None:
            handled.set()
        await settle([job.ctx.outbox for job in jobs], self.settings.ack_wait_s / 2)
        if settled is not None:
            await settled()
        done: list[Job] = []
        for job, error in zip(jobs, errors, strict=True):
            failure = error or job.ctx.outbox.outcome()
            if failure is None:
                done.append(job)
            else:
                await failures.handler_failed(spec, job, failure)
        done = await self._deferred(done)
        if not done:
            return
        acks = await self._ack(inbox, done)
        published = acked = 0
        for job, ack in zip(done, acks, strict=True):
            if ack is not None:
                # The effects are stored; the redelivery re-publishes them as duplicates.
                log.warning("ack failed", extra={"error": repr(ack), "seq": job.ctx.stream_seq})
                continue
            published += len(job.ctx.outbox)
            acked += 1
            job.ctx.outbox.acked()
            self._settled.forget(job.ctx.stream, job.ctx.stream_seq)  # it will not come back
        self._outcomes["acked"].inc(acked)
        if published:
            self._published.inc(published)
        self._latency.observe(time.perf_counter() - started)

    async def _ack(self, inbox: AckInbox, jobs: list[Job]) -> list[BaseException | None]:
        """Ack every job's message, pipelined, and wait until the server recorded each ack
        (or `ack_wait_s / 2` passed); None for each ack recorded, else what went wrong.

        A message whose ack is not recorded is redelivered after the ack wait, and its
        effects, published again with the same ids, are dropped as duplicates.
        """
        sent: list[asyncio.Future[None] | BaseException] = []
        for job in jobs:
            try:
                sent.append(await inbox.ack(job.msg.reply))
            except PublishStalled as exc:  # the rest would each wait as long: give up now
                sent.extend([exc] * (len(jobs) - len(sent)))
                break
            except Exception as exc:
                sent.append(exc)
        waiting = [item for item in sent if isinstance(item, asyncio.Future)]
        late = set(await wait_all(waiting, self.settings.ack_wait_s / 2))
        for future in late:
            future.cancel()
        return [_ack_failure(item, late) for item in sent]

    async def _deferred(self, done: list[Job]) -> list[Job]:
        """Nak the messages whose handlers deferred them (with their delay); return the rest."""
        ack = []
        for job in done:
            delay = job.ctx.deferral.delay_s
            if delay is None:
                ack.append(job)
                continue
            try:
                await job.msg.nak(delay=delay)
            except Exception as exc:  # the ack wait redelivers it anyway
                log.debug("nak failed", extra={"error": repr(exc)})
            self._settled.add(job.ctx.stream, job.ctx.stream_seq)
            self._outcomes["deferred"].inc()
        return ack
