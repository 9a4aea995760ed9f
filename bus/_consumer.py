"""A durable pull-consumer loop: bounded batches, heartbeats for long work, a watchdog.

The loop owns fetching only; what happens to a fetched batch is the `process` callback's job
(bus/_runtime.py). Each batch runs in a task of the loop's TaskGroup: one batch at a time for
actors that handle messages in order, or concurrently up to `max_in_flight` messages in all.
An in-order actor may let the next batch be fetched and handled while the previous one's
effects are still being stored (`settles_behind`): handling stays one batch at a time, in
order, and the server's work on one batch overlaps the actor's work on the next.
The loop never fetches more than it has room for, so a slow handler applies back-pressure
instead of letting messages time out in a local queue. One task per batch rather than per
message keeps the per-envelope cost close to raw nats-py. Fetching itself is bus/_puller.py's:
nats-py's `fetch` lets an orphaned request hold a message for up to a fetch timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine

from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig
from nats.js.errors import NotFoundError

from bus._actor import Input
from bus._connection import Link
from bus._consumer_config import ConsumerBindError, consumer_config, differences
from bus._elections import through_elections
from bus._metrics import ActorMetrics
from bus._puller import Puller
from bus._settings import Settings
from bus._slots import Slots

__all__ = ("ConsumerLoop", "refetch_pause_s")

log = logging.getLogger("parley.bus.consumer")


_FIRST_REFETCH_PAUSE_S = 0.25


def refetch_pause_s(failures: int, longest_s: float) -> float:
    """The pause after the `failures`-th failed fetch in a row: short at first, doubling up
    to `longest_s`. A fetch refused with `503` while a consumer's leader is elected usually
    succeeds a moment later; waiting the longest backoff step (5 s) after the first refusal
    made every consumer of the cluster recover seconds after its election had ended."""
    doubled: float = _FIRST_REFETCH_PAUSE_S * 2.0 ** max(0, failures - 1)
    return min(longest_s, doubled)


class ConsumerLoop:
    """Fetch from one durable consumer and hand each batch to `process`."""

    def __init__(
        self,
        js: JetStreamContext,
        spec: Input,
        settings: Settings,
        metrics: ActorMetrics,
        process: Callable[[list[Msg], asyncio.Event], Awaitable[None]],
        *,
        sequential: bool = False,
        settles_behind: bool = False,
        gathers_s: float = 0.0,
        link: Link | None = None,
    ) -> None:
        """`process(messages, handled)` sets `handled` once the batch's handlers have run
        (its effects may still be in flight). `sequential`: the next fetch waits for the
        batch to finish, or only for `handled` if `settles_behind`; room for a second batch
        is then made, so one batch can settle while the next is handled. `gathers_s`: how
        long a first message after idling waits for others (`Actor.gathers_s`). `link`: the
        connection's state, so no pull request is sent while it is down (bus/_puller.py)."""
        self.spec = spec
        self._js = js
        self._settings = settings
        self._metrics = metrics
        self._process = process
        self._in_flight: dict[int, tuple[Msg, float]] = {}  # by id(): Msg is unhashable
        self._slots = Slots(settings.max_in_flight * (2 if sequential and settles_behind else 1))
        self._idle_fetches = 0
        self._finished = asyncio.Event()
        self._bound: Puller | None = None
        self._fetch_failures = 0  # in a row: the next pause after a failed fetch grows
        self._sequential = sequential
        self._settles_behind = settles_behind
        self._gathers_s = gathers_s
        self._link = link
        self._received = metrics.received.labels(settings.actor_id, spec.stream)

    def consumer_config(self) -> ConsumerConfig:
        return consumer_config(self.spec, self._settings)

    async def _bind(self) -> Puller:
        # Bound while the consumer's (or the stream's) leader is elected: a moment after a
        # cluster regains quorum, creating or looking up a consumer is answered 503.
        if self._settings.create_consumers:
            config = self.consumer_config()
            await through_elections(
                lambda: self._js.add_consumer(self.spec.stream, config), "creating a consumer"
            )
        else:
            await through_elections(self._check_provisioned, "looking up a consumer")
        settings, spec = self._settings, self.spec
        # The connection and API prefix the JetStream context was made with (nats-py keeps
        # them private): requests go where nats-py's own fetch would send them.
        puller = Puller(
            self._js._nc,
            f"{self._js._prefix}.CONSUMER.MSG.NEXT.{spec.stream}.{spec.durable}",
            expires_s=settings.fetch_timeout_s,
            heartbeat_s=settings.fetch_heartbeat_s,
            link=self._link,
        )
        await puller.start()
        return puller

    async def _check_provisioned(self) -> None:
        """Bind only to a consumer that is the one this actor would have created.

        Raises:
            ConsumerBindError: it is missing, or differs in what the runtime relies on (an
                ack wait shorter than the actor thinks would redeliver its long handlers).
        """
        spec = self.spec
        try:
            info = await self._js.consumer_info(spec.stream, spec.durable)
        except NotFoundError:
            raise ConsumerBindError(
                f"consumer {spec.durable} on {spec.stream} does not exist and this actor may not "
                "create it (create_consumers = false): run `parley provision` with its settings"
            ) from None
        found = differences(self.consumer_config(), info.config)
        if found:
            raise ConsumerBindError(
                f"consumer {spec.durable} on {spec.stream} differs from this actor's settings "
                f"({'; '.join(found)}): run `parley provision` with its settings"
            )

    @property
    def _puller(self) -> Puller:
        if self._bound is None:
            raise RuntimeError("consumer loop used before run() bound it")
        return self._bound

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    async def run(self, stopping: asyncio.Event, ready: asyncio.Event) -> None:
        """Fetch until `stopping` is set, then wait for in-flight messages to finish."""
        self._bound = await self._bind()
        ready.set()
        try:
            await self._fetch_until_stopped(stopping)
        except* _GraceExpired:
            pass
        finally:
            try:
                await asyncio.wait_for(self._puller.close(), timeout=2)
            except Exception as exc:  # closing anyway; never hide the error that got us here
                log.debug("unsubscribe on stop failed", extra={"error": repr(exc)})

    async def _fetch_until_stopped(self, stopping: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as tasks:
            heartbeat = tasks.create_task(self._heartbeat())
            stop_wait = tasks.create_task(stopping.wait())
            behind: asyncio.Task[None] | None = None
            while not stopping.is_set():
                room = await self._reserve(stop_wait)
                if room == 0:
                    break  # stopping while every slot was busy
                messages = await self._fetch(room, stop_wait)
                if messages and len(messages) < room and self._gathers_s > 0:
                    messages += await self._gather(room - len(messages), stop_wait)
                self._slots.release(room - len(messages))
                if not messages:
                    if not stopping.is_set():
                        await self._after_empty_fetch(stop_wait)
                    continue
                self._idle_fetches = 0
                self._received.inc(len(messages))
                now = time.monotonic()
                for msg in messages:
                    self._in_flight[id(msg)] = (msg, now)
                handled = asyncio.Event()
                batch = tasks.create_task(self._run_batch(messages, handled))
                if not self._sequential:
                    continue
                if not self._settles_behind:  # the next fetch waits for this batch (or a stop)
                    await asyncio.wait({batch, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                    continue
                # The next fetch waits for this batch's handlers and for the batch before it
                # to settle: one batch settles behind the one being handled, never more.
                waited = tasks.create_task(handled.wait())
                await asyncio.wait({waited, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                waited.cancel()
                if behind is not None:
                    await asyncio.wait({behind, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                behind = batch
            await self._drain_in_flight()
            heartbeat.cancel()

    async def _reserve(self, stop_wait: asyncio.Task[object]) -> int:
        """Take as many free slots as a fetch may fill (at least one); 0 if stopping first."""
        if not self._slots.free:
            freed = asyncio.ensure_future(self._slots.freed.wait())
            await asyncio.wait({freed, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if not freed.done():
                freed.cancel()
                await asyncio.gather(freed, return_exceptions=True)
                return 0
        return self._slots.take(self._settings.fetch_batch)

    async def _fetch(self, room: int, stop_wait: asyncio.Task[object]) -> list[Msg]:
        """One fetch of up to `room` messages, abandoned (and cancelled) on stop."""
        return self._fetched(await _unless_stopped(self._puller.fetch(room), stop_wait))

    async def _gather(self, room: int, stop_wait: asyncio.Task[object]) -> list[Msg]:
        """After a fetch that had to linger for its message (the input was idle), the
        messages stored within `gathers_s`, handed over in the same batch; none after a
        fetch that found a backlog, whose batch formed by itself."""
        puller = self._puller
        if not puller.lingered:
            return []
        # A deliberate delay (the gathering window), not a wait for an event.
        await asyncio.wait({stop_wait}, timeout=self._gathers_s)
        if stop_wait.done():
            return []
        fetch = await _unless_stopped(puller.fetch_now(room), stop_wait)
        if fetch.cancelled():
            return []
        if fetch.exception() is not None:  # what it would have found comes with the next fetch
            log.debug("gathering fetch failed", extra={"error": repr(fetch.exception())})
            return []
        return fetch.result()

    def _fetched(self, fetch: asyncio.Future[list[Msg]]) -> list[Msg]:
        if fetch.cancelled():
            return []
        exc = fetch.exception()
        if exc is None:
            self._fetch_failures = 0
            messages = fetch.result()
            if not messages:
                self._idle_fetches += 1
            return messages
        if isinstance(exc, ConnectionClosedError):
            raise exc
        log.warning("fetch failed", extra={"error": repr(exc), "stream": self.spec.stream})
        self._idle_fetches += 1
        self._fetch_failures += 1
        return []

    async def _after_empty_fetch(self, stop_wait: asyncio.Task[object]) -> None:
        """Back off after a failed fetch (a reconnect, a consumer's leader being elected), then
        let the watchdog look."""
        if self._fetch_failures:
            pause = refetch_pause_s(self._fetch_failures, self._settings.backoff_s[-1])
            await asyncio.wait({stop_wait}, timeout=pause)
        await self._watchdog()

    async def _run_batch(self, messages: list[Msg], handled: asyncio.Event) -> None:
        try:
            await self._process(messages, handled)
        finally:
            handled.set()
            for msg in messages:
                self._in_flight.pop(id(msg), None)
            self._slots.release(len(messages))
            self._finished.set()

    async def _drain_in_flight(self) -> None:
        """Give in-flight handlers `grace_s` to finish; the rest are redelivered later."""
        try:
            async with asyncio.timeout(self._settings.grace_s):
                while self._in_flight:
                    self._finished.clear()
                    await self._finished.wait()
        except TimeoutError:
            log.warning(
                "grace period over; unfinished messages will be redelivered",
                extra={"count": len(self._in_flight)},
            )
            raise _GraceExpired from None

    async def _heartbeat(self) -> None:
        """Tell JetStream about messages still being worked on, so they are not redelivered.

        Only for `max_handler_s`: a handler stuck past it stops being vouched for, so JetStream
        redelivers its message (to another replica, or to this one once it is free) instead of
        a hung process holding it for ever. The late answer of the stuck one, if it ever comes,
        carries the lower delivery number and loses.
        """
        period = self._settings.ack_wait_s / 3
        limit = self._settings.max_handler_s
        while True:
            await asyncio.sleep(period)  # the heartbeat's own timer, not a wait for an event
            now = time.monotonic()
            for msg, started in list(self._in_flight.values()):
                if period <= now - started < limit:
                    try:
                        await msg.in_progress()
                    except Exception as exc:  # a lost heartbeat only risks a redelivery
                        log.debug("in_progress failed", extra={"error": repr(exc)})

    async def _watchdog(self) -> None:
        """Re-bind when fetches stay empty while the consumer has messages pending.

        A pull subscription can go deaf (a reconnect that lost the pull request, a consumer
        deleted and re-created by an operator); checking the consumer's own counters tells a
        quiet stream from a deaf subscription.
        """
        if self._idle_fetches < self._settings.watchdog_idle_fetches:
            return
        self._idle_fetches = 0
        try:
            info = await self._js.consumer_info(self.spec.stream, self.spec.durable)
        except NotFoundError:
            log.warning("consumer vanished; re-creating it", extra={"durable": self.spec.durable})
        except Exception as exc:
            log.warning("consumer_info failed", extra={"error": repr(exc)})
            return
        else:
            if info.num_pending == 0:
                return
            log.warning(
                "fetches empty while messages pend; re-binding",
                extra={"durable": self.spec.durable, "pending": info.num_pending},
            )
        try:
            fresh = await self._bind()
        except Exception as exc:  # JetStream recovering or a reconnect: try again later
            log.warning("re-bind failed; keeping the old binding", extra={"error": repr(exc)})
            return
        self._metrics.rebinds.labels(self._settings.actor_id).inc()
        old, self._bound = self._bound, fresh
        if old is not None:
            try:
                await old.close()
            except Exception as exc:
                log.debug("unsubscribe during re-bind failed", extra={"error": repr(exc)})


async def _unless_stopped(
    fetching: Coroutine[object, object, list[Msg]], stop_wait: asyncio.Task[object]
) -> asyncio.Future[list[Msg]]:
    """Run a fetch until it ends or the stop comes first (then it is cancelled); the
    finished future."""
    fetch = asyncio.ensure_future(fetching)
    try:
        await asyncio.wait({fetch, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not fetch.done():
            fetch.cancel()
            await asyncio.gather(fetch, return_exceptions=True)
    return fetch


class _GraceExpired(Exception):
    """Raised inside the TaskGroup to cancel handlers that outlived the grace period."""
