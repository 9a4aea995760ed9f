"""Reading a stream's stored messages in order, through a subject filter.

The audit tools and the auditor's own start-up read history, never live traffic: an
ephemeral ordered consumer, starting at a sequence and filtered by subject, read until it has
nothing pending. The filter is applied by the server, so a reader scoped to one
profile's subject is never sent another profile's records.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

__all__ = ("StoredMessage", "read_history")

log = logging.getLogger("parley.bus.history")


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One stored message: where it sits and exactly what is stored."""

    seq: int
    subject: str
    data: bytes
    headers: dict[str, str]


async def read_history(
    js: JetStreamContext,
    stream: str,
    *,
    subject: str | None = None,
    start_seq: int = 1,
    timeout: float = 5.0,
) -> AsyncIterator[StoredMessage]:
    """Yield the messages of `stream` (matching `subject`) from `start_seq` to the end.

    The end is what was pending when the reader started plus whatever arrives while it
    reads; it stops as soon as nothing is pending. The reader is an ordered push consumer
    delivering to this connection's inbox: it needs only the rights to create an ephemeral
    consumer and receive its flow control, not to pull from consumers by name.
    """
    sub = await js.subscribe(
        subject or ">",
        stream=stream,
        ordered_consumer=True,
        config=ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=max(1, start_seq),
            filter_subject=subject or ">",
        ),
    )
    try:
        info = await sub.consumer_info()
        if info.num_pending == 0 and not (info.delivered and info.delivered.consumer_seq):
            return
        while True:
            try:
                msg = await sub.next_msg(timeout=timeout)
            except (TimeoutError, NatsTimeoutError):
                return  # nothing arrived: the consumer's pending count was stale
            meta = msg.metadata
            yield StoredMessage(meta.sequence.stream, msg.subject, msg.data, msg.headers or {})
            if meta.num_pending == 0:
                return
    finally:
        try:
            await sub.unsubscribe()
        except Exception as exc:  # an ephemeral consumer removes itself when left inactive
            log.debug("unsubscribe of a history reader failed", extra={"error": repr(exc)})
