"""A key's history as the bucket's leader has it: reading your own writes on a replicated bucket.

nats-py's `KeyValue.history` reads through an ephemeral R1 ordered consumer, and nats-server
places such a consumer on any active replica of the bucket's stream, picked at random
(`createGroupForConsumer`). A put is acknowledged once a majority of the replicas stored it,
so the remaining one may not have it yet: a history read straight after a put, through a
consumer on that replica, ends a revision or more short. On a local 3-node cluster 7 of 200
put-then-read rounds did (tests/integration/test_kv_history.py counts them).

`leader_history` first asks the newest revision of the key of the stream's leader (a
`STREAM.MSG.GET`, which only the leader answers on a bucket without direct gets; with direct
gets any replica answers it, so this is for buckets without them), then reads the history
until it reaches that revision. A read that falls short is asked again after a short pause;
each attempt's consumer lands on a replica picked afresh, and a lagging one catches up in
milliseconds. After `_PAUSES_S` the history is returned as read, with a warning: a replica
cut off from its leader for seconds must not stop the caller, who then reads its watch.
"""

from __future__ import annotations

import asyncio
import logging

from nats.js.errors import KeyNotFoundError, NoKeysError
from nats.js.kv import KeyValue

__all__ = ("leader_history", "leader_revision")

log = logging.getLogger("parley.bus.kv_history")

_PAUSES_S = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 1.0, 1.0, 1.0)
"""The pauses before each read of the history (about 5 s in all, the first read at once)."""


async def leader_revision(kv: KeyValue, key: str) -> int:
    """The newest revision of `key`, a delete marker's included, as the stream's leader has it
    (0: the key was never written, or its history was purged)."""
    try:
        entry = await kv.get(key)
    except KeyNotFoundError as exc:  # deleted (the marker is its entry) or never written
        entry = exc.entry
    return int(entry.revision or 0) if entry is not None else 0


async def leader_history(kv: KeyValue, key: str) -> list[KeyValue.Entry]:
    """Every kept revision of `key`, oldest first, up to at least the leader's newest when
    it was asked (empty: no revision is kept). `kv` must not allow direct gets."""
    newest = await leader_revision(kv, key)
    entries: list[KeyValue.Entry] = []
    read = 0
    for pause in _PAUSES_S:
        await asyncio.sleep(pause)
        try:
            entries = await kv.history(key)
        except NoKeysError:
            entries = []
        read = int(entries[-1].revision or 0) if entries else 0
        if read >= newest:
            return entries
    log.warning(
        "a replica's history stayed behind its leader's",
        extra={"key": key, "newest": newest, "read": read},
    )
    return entries
