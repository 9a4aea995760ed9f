"""The auditor: the single writer of Parley's redacted, hash-chained audit history.

It reads every fact of `PARLEY_EVENTS` (the gate's decisions and the router's session events)
through one durable consumer, and every dead letter of `PARLEY_DEAD` through another (a raw
input: a dead letter is the bad bytes themselves, never decoded), so a crash loses nothing: a
fact is acked only once all its records are stored. Each fact becomes one record per profile it
concerns (actors/auditor/_facts.py), each dead letter one record under the actor that gave up on
it (actors/auditor/_dead_letters.py), redacted, chained and appended to
`parley.audit.<tenant>.<profile>` by the pipelined single writer (actors/auditor/_appender.py).
Every `checkpoint_every` records, and every `checkpoint_s` seconds while new records came in,
it signs a checkpoint, appends it on `parley.audit.<tenant>._checkpoint` and writes it to its
log for copies off the box.

Options (`[options]` in its TOML settings):
    signing_key: Ed25519 private key (PEM) that signs checkpoints. Required.
    tenant: Subject token of this deployment's tenant (default `default`).
    checkpoint_every / checkpoint_s: Checkpoint period in records / seconds (1000 / 10).
    redact_pii: Profiles whose records lose personal data too (`["*"]`, the default: all).
    pii_kinds: Which kinds of personal data (default: every kind schemas knows).
    session_profile: Owner of session events that have no speaker (default `router`).
    lease_s: How long the writer's lease outlives its last renewal (default 5 s): the bound
        on a standby's takeover (actors/auditor/_lease.py).

Replicas: any number of auditors may run; one holds the writer's lease and reads and appends,
the others wait in `start()` (they read nothing, so they hold back no fact) until its lease
runs out or is given back. A standby waiting there is stopped by SIGTERM/SIGINT like any actor.
A holder that loses its lease stops appending at once, then stops (its handlers in hand
settle first) and exits non-zero; its supervisor brings it back as a standby. A lease that
lapses because the cluster is electing (renewals unanswered) is not lost: the holder appends
nothing until a renewal on its own revision gets through (actors/auditor/_lease.py).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import signal
from collections.abc import Sequence
from typing import ClassVar

from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
)
from nats.js.api import PubAck

from actors.auditor._appender import ChainAppender, ForeignWrite
from actors.auditor._chain import CHECKPOINT_PROFILE, Checkpoint, sign_checkpoint
from actors.auditor._dead_letters import DeadLetter, dead_letter_record
from actors.auditor._facts import (
    ALERT_PROFILE,
    FactSource,
    Redactor,
    alert_record,
    records_for,
    unvouched_record,
)
from actors.auditor._lease import LeaseLost, WriterLease, stop_when_lost
from actors.auditor._metrics import AuditMetrics
from actors.auditor._options import AuditorOptions, load_signing_key
from bus import (
    CAUSATION_ID,
    HOP_COUNT,
    ORIGIN,
    TRACE_ID,
    Actor,
    BusHandle,
    Context,
    Input,
    Settings,
    validated_options,
    well_formed_traceparent,
)
from schemas import AnyEnvelope, AuditRecord, key_id, utc_now

__all__ = ("AuditorActor", "AuditorOptions")

log = logging.getLogger("parley.actors.auditor")


class AuditorActor(Actor):
    """Turns every fact on `PARLEY_EVENTS` and every dead letter on `PARLEY_DEAD` into chained,
    redacted audit records."""

    kind: ClassVar[str] = "auditor"
    concurrent_handlers: ClassVar[bool] = True
    """Batches overlap so appends stay pipelined; the appender's lock keeps the chain ordered."""
    gathers_s: ClassVar[float] = 0.025
    """The facts of one `say` come over a few tens of milliseconds: gathered, they cost the
    auditor a pull, a flush of appends and one of acks each few, not each one."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.options = validated_options(AuditorOptions, settings.options, "auditor")
        self._key = load_signing_key(self.options.signing_key)
        raw = self._key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        # Marker hashes are keyed by the deployment's own secret, never a public constant.
        redact_key = hashlib.sha256(b"parley-redact-key\x00" + raw).digest()
        self._redactor = Redactor(
            key=redact_key,
            pii_profiles=frozenset(self.options.redact_pii),
            pii_kinds=frozenset(self.options.pii_kinds) if self.options.pii_kinds else None,
        )
        self._appender: ChainAppender | None = None
        self._lease: WriterLease | None = None
        self._stop_asked = asyncio.Event()
        self._released = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None
        self._signals_taken = False
        self._stood_down = False
        self._metrics = AuditMetrics(self.actor_id)
        self._checkpoint_subject = self.namespace.audit(self.options.tenant, CHECKPOINT_PROFILE)
        self._standings = f"{self.namespace.root}.standing."

    def inputs(self) -> Sequence[Input]:
        """Everything on the events stream (decisions and session events alike) and every
        dead letter. PARLEY_DEAD is a limits stream: reading it removes nothing."""
        if self._stood_down:
            return ()  # stopped while standing by: read nothing
        ns = self.namespace
        return (
            Input(ns.stream("events"), f"{ns.root}.>", self.actor_id, "header"),
            Input(ns.stream("dead"), ns.wildcard("dead"), self.actor_id, raw=True),
        )

    async def start(self, bus: BusHandle) -> None:
        """Take the writer's lease (standing by while another replica holds it), then read
        the chain's head and the facts already recorded."""
        self._metrics.open(bus, self.inputs(), lambda: self._appender)
        lease = WriterLease(
            bus.js, self.namespace.bucket("leases"), f"{self.actor_id}.writer", self.options.lease_s
        )
        self._lease = lease
        await lease.open()
        if not await self._take_lease(lease):
            self._stood_down = True
            return
        # Renewed from now on, through reading the head, until `stop()` gives it back.
        self._keeper = asyncio.create_task(lease.keep(self._released))
        try:
            await self._open_appender(bus, lease)
        except BaseException:
            self._keeper.cancel()
            raise

    async def _open_appender(self, bus: BusHandle, lease: WriterLease) -> None:
        self._appender = ChainAppender(
            bus.nc,
            bus.js,
            self.namespace.stream("audit"),
            settle_s=max(self.settings.ack_wait_s, 2.0),
            window=self.options.recent_window,
            on_foreign=self._alert,
            on_unvouched=self._unvouched,
            epoch=lease.holder,
            may_append=lease.check,
            link=bus.link,
        )
        await self._appender.open()
        log.info(
            "auditor signing checkpoints",
            extra={"key_id": key_id(self._key.public_key()), "tenant": self.options.tenant},
        )

    async def _take_lease(self, lease: WriterLease) -> bool:
        """Hold the lease (True), or stand by until it is free; False if asked to stop first.

        The runtime's stop event is not ours to see yet in `start()`, so a standby answers
        SIGTERM and SIGINT itself until `background()` hands them back to the runtime.
        """
        if await lease.acquire_free():
            return True
        loop = asyncio.get_running_loop()
        try:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self._stop_asked.set)
            self._signals_taken = True
        except (RuntimeError, ValueError):  # not the main thread: stopped with its task
            pass
        return await lease.acquire(self._stop_asked)

    async def background(self, stopping: asyncio.Event) -> None:
        """Keep the lease, and run the checkpoint timer: every `checkpoint_s` seconds while
        records keep arriving.

        The runtime runs it beside the handlers and waits for it to end before `stop()`;
        a lost lease stops the actor from here.
        """
        if self._signals_taken:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, stopping.set)
        if self._stood_down or self._keeper is None:
            stopping.set()
            return
        if self._stop_asked.is_set():  # a signal came while `start()` was reading the head
            stopping.set()
        # Renewals go on past `stopping` until `stop()` has written the final checkpoint.
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._checkpoints(stopping))
            tasks.create_task(self._metrics.watch(stopping))
            tasks.create_task(stop_when_lost(self._keeper, stopping))

    async def _checkpoints(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                await asyncio.wait_for(stopping.wait(), timeout=self.options.checkpoint_s)
            except TimeoutError:
                try:
                    await self._checkpoint()
                except Exception as exc:  # retried at the next tick
                    log.warning("checkpoint failed", extra={"error": repr(exc)})

    async def stop(self) -> None:
        """Pin everything written with a final checkpoint (the timer has stopped by now)."""
        lease = self._lease
        if lease is None or not lease.held():
            self._released.set()  # a standby, or a holder that lost its lease: nothing to pin
            if self._keeper is not None:
                await asyncio.gather(self._keeper, return_exceptions=True)
                if not self._keeper.cancelled() and self._keeper.exception() is not None:
                    raise LeaseLost("stopped after losing the writer's lease")
            return
        try:
            await asyncio.wait_for(self._checkpoint(), timeout=self.settings.grace_s or 1.0)
        except Exception as exc:  # the next start checkpoints what this one could not
            log.warning("final checkpoint failed", extra={"error": repr(exc)})
        self._released.set()
        if self._keeper is not None:
            await asyncio.gather(self._keeper, return_exceptions=True)
        await lease.release()

    def _sign(self, checkpoint: Checkpoint) -> bytes:
        return sign_checkpoint(checkpoint, self._key)

    def _alert(self, event: ForeignWrite) -> tuple[str, AuditRecord]:
        detail = (
            f"{event.last_seq - event.first_seq + 1} message(s) at seq {event.first_seq}.."
            f"{event.last_seq} not written by the auditor, on {', '.join(event.subjects)}"
        )
        record = alert_record(
            tenant=self.options.tenant,
            profile=ALERT_PROFILE,
            detail=detail,
            at=utc_now(),
            first_seq=event.first_seq,
            last_seq=event.last_seq,
        )
        return self.namespace.audit(self.options.tenant, record.profile), record

    def _unvouched(self, first: int, last: int) -> tuple[str, AuditRecord]:
        record = unvouched_record(tenant=self.options.tenant, first=first, last=last, at=utc_now())
        return self.namespace.audit(self.options.tenant, record.profile), record

    async def _checkpoint(self) -> None:
        appender = self._appender
        if appender is None:
            return
        sent = await appender.append_checkpoint(self._checkpoint_subject, self._sign)
        if sent is None:
            return
        future, signed, count = sent
        future.add_done_callback(functools.partial(_log_checkpoint, signed, count))
        future.add_done_callback(self._metrics.checkpoint_stored)
        await asyncio.wait_for(asyncio.shield(future), timeout=self.settings.ack_wait_s)

    async def handle(self, envelope: AnyEnvelope, ctx: Context) -> None:
        appender = self._appender
        if appender is None:
            raise RuntimeError("auditor handled a message before start()")
        if ctx.subject.startswith(self._standings):
            return  # the router's copy of an opening or an end, recorded from its timeline
        source = FactSource(
            stream=ctx.stream,
            seq=ctx.stream_seq,
            trace_id=ctx.trace_id,
            hop_count=ctx.hop_count,
            causation_id=ctx.causation_id,
            origin=ctx.trace.origin,
            at=utc_now(),
            traceparent=well_formed_traceparent(ctx.headers),
        )
        records = records_for(
            envelope,
            source,
            tenant=self.options.tenant,
            redactor=self._redactor,
            runner=self.options.session_profile,
        )
        await self._append(appender, records, ctx, envelope.id)

    async def handle_raw(self, ctx: Context) -> None:
        """Record one dead letter: never its payload, only its size and digest.

        A failure here is retried like a fact's; on the last delivery the runtime gives up on
        it (logged, counted as abandoned) rather than dead-letter a dead letter into a loop.
        """
        appender = self._appender
        if appender is None:
            raise RuntimeError("auditor handled a message before start()")
        letter = DeadLetter(ctx.subject, ctx.stream, ctx.stream_seq, ctx.headers, ctx.payload)
        record = dead_letter_record(
            letter, tenant=self.options.tenant, redactor=self._redactor, at=utc_now()
        )
        await self._append(appender, [record], ctx, "")

    async def _append(
        self, appender: ChainAppender, records: list[AuditRecord], ctx: Context, cause: str
    ) -> None:
        """Append the records not yet stored; their acks join the input's outbox.

        `cause` is the id of the fact recorded (empty for a dead letter, which has none).
        """
        for record in records:
            known, pending = appender.recorded(record.id)
            if not known:
                subject = self.namespace.audit(record.tenant, record.profile)
                headers = _trace_headers(record, cause)
                pending = await appender.append_record(subject, record, headers)
            if pending is not None:
                # The append itself must only ever end with the server's answer, which is
                # what the chain's state follows: the outbox waits on it, never cancels it.
                ctx.outbox.include(pending)
        if appender.unpinned >= self.options.checkpoint_every:
            sent = await appender.append_checkpoint(self._checkpoint_subject, self._sign)
            if sent is not None:
                future, signed, count = sent
                future.add_done_callback(functools.partial(_log_checkpoint, signed, count))
                future.add_done_callback(self._metrics.checkpoint_stored)


def _trace_headers(record: AuditRecord, cause: str) -> dict[str, str]:
    """The trace headers of an audit record: its own trace, taken from the record.

    Never from the fact's headers: a decision is about an envelope of some trace, and its
    record belongs to that trace, whatever headers the decision itself was published with.
    """
    if not record.trace_id:
        return {}
    headers = {TRACE_ID: record.trace_id, HOP_COUNT: str(record.hop_count), ORIGIN: record.origin}
    if cause:
        headers[CAUSATION_ID] = cause
    return headers


def _log_checkpoint(signed: bytes, count: int, future: asyncio.Future[PubAck]) -> None:
    """Log a checkpoint once it is stored (an unstored one would pin records that are not).

    The log line is the off-box copy: a log shipper keeps it where the stream's writers
    cannot reach it.
    """
    if not future.cancelled() and future.exception() is None:
        log.info("audit checkpoint", extra={"count": count, "checkpoint": signed.decode()})
