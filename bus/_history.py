"""Reading a stream's stored messages in order, through a subject filter.

The audit tools and the auditor's own start-up read history, never live traffic, with batched
direct gets (`$JS.API.DIRECT.GET.<stream>` with `next_by_subj`): the server filters by
subject, so a reader scoped to one profile's subject is never sent another profile's records,
and the reader creates no consumer. That matters under least privilege: whoever creates a
consumer chooses where a push consumer writes what it reads, so an operator's audit reader in
an account of its own is granted direct gets on the audit stream and nothing else.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

__all__ = ("DIRECT_HEADERS", "HistoryError", "StoredMessage", "read_history")

log = logging.getLogger("parley.bus.history")


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One stored message: where it sits and exactly what is stored."""

    seq: int
    subject: str
    data: bytes
    headers: dict[str, str]


class HistoryError(RuntimeError):
    """The server answered a history read with an error status (not "no more messages")."""


_BATCH = 256
DIRECT_HEADERS = frozenset(
    {
        "Nats-Stream",
        "Nats-Subject",
        "Nats-Sequence",
        "Nats-Time-Stamp",
        "Nats-Num-Pending",
        "Nats-Last-Sequence",
    }
)
"""Headers a direct get adds to a stored message (where it is stored), not its own."""


async def read_history(
    js: JetStreamContext,
    stream: str,
    *,
    subject: str | None = None,
    start_seq: int = 1,
    timeout: float = 5.0,
) -> AsyncIterator[StoredMessage]:
    """Yield the messages of `stream` (matching `subject`) from `start_seq` to the end.

    The end is what was stored when the last batch was read: batches of up to 256 follow each
    other until the server says nothing matching is pending. The stream must allow direct
    gets (every Parley stream that is read back does).

    Raises:
        HistoryError: the server refused the read (no such stream, no direct gets).
        TimeoutError: a batch did not arrive within `timeout`.
    """
    nc: NATS = js._nc  # nats-py keeps the connection and API prefix of a context private
    api: str = js._prefix
    answers: asyncio.Queue[Msg] = asyncio.Queue()
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=answers.put)
    seq = max(1, start_seq)
    request = {"seq": seq, "batch": _BATCH, "next_by_subj": subject or ">"}
    try:
        while True:
            request["seq"] = seq
            await nc.publish(f"{api}.DIRECT.GET.{stream}", json.dumps(request).encode(), inbox)
            while True:
                async with asyncio.timeout(timeout):
                    msg = await answers.get()
                headers = msg.headers or {}
                status = headers.get("Status")
                if status == "404":
                    return  # nothing (more) matches from `seq` on
                if status == "204":  # the end of this batch
                    if int(headers.get("Nats-Num-Pending", "0")) == 0:
                        return
                    break
                if status == "503":  # no responders: nothing serves that stream here
                    raise HistoryError(
                        f"no stream {stream} on this server (503, no responders): is Parley's "
                        "system running here, provisioned? (`parley up` in this directory)"
                    )
                if status is not None:
                    raise HistoryError(f"reading {stream} from {seq}: {status} {msg.data!r}")
                stored = int(headers["Nats-Sequence"])
                own = {k: v for k, v in headers.items() if k not in DIRECT_HEADERS}
                yield StoredMessage(stored, headers["Nats-Subject"], msg.data, own)
                seq = stored + 1
    finally:
        try:
            await sub.unsubscribe()
        except Exception as exc:  # the connection may already be closing
            log.debug("unsubscribe of a history reader failed", extra={"error": repr(exc)})
