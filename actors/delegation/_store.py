"""Where a host keeps its waits: a `waits` bucket of its own, which only that host may use.

The bucket is the agent's own (`Namespace.agent_bucket`: `parley_waits_<host>`), bounded on
its own (docs/quotas.md): a host that fills it stops only its own calls to other agents.
Broker permissions give each agent its own bucket and no other (tools/natsconf/). Keys are
`<host>.wait.<call id>` (the `Wait`) and `<host>.req.<request envelope id>` (which wait a
request belongs to, so an answer finds its wait from the id it names). Every write of a wait
is a compare-and-set on the revision it was read at: two answers of one fan-out handled at
once never overwrite each other's result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import msgspec
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from actors.delegation._wait import Wait
from bus import BusHandle, ConfigError, provision_agent

__all__ = ("WaitConflict", "WaitStore", "open_wait_store")

_decoder = msgspec.json.Decoder(Wait)
_encoder = msgspec.json.Encoder()


class WaitConflict(Exception):
    """Someone else wrote the wait since it was read: read it again and re-apply."""


class WaitStore:
    """One host's waits."""

    def __init__(self, kv: KeyValue, host: str) -> None:
        self._kv = kv
        self._host = host

    def _wait_key(self, call_id: str) -> str:
        return f"{self._host}.wait.{call_id}"

    def _request_key(self, envelope_id: str) -> str:
        return f"{self._host}.req.{envelope_id}"

    async def load(self, call_id: str) -> tuple[Wait, int] | None:
        """The wait of call `call_id` and its revision, or None when there is none."""
        try:
            entry = await self._kv.get(self._wait_key(call_id))
        except KeyNotFoundError:
            return None
        if entry.value is None or entry.revision is None:
            return None
        return _decoder.decode(entry.value), entry.revision

    async def create(self, wait: Wait) -> tuple[Wait, int]:
        """Store a new wait, or return the one already stored for its call (a redelivered
        call whose first handling stored it: that one stands)."""
        try:
            revision = await self._kv.create(self._wait_key(wait.call_id), _encoder.encode(wait))
        except KeyWrongLastSequenceError:
            found = await self.load(wait.call_id)
            if found is None:
                raise WaitConflict(f"the wait of {wait.call_id} vanished while created") from None
            return found
        return wait, revision

    async def update(self, wait: Wait, revision: int) -> int:
        """Write `wait` if it is still at `revision`; its new revision.

        Raises:
            WaitConflict: it changed since it was read.
        """
        try:
            return await self._kv.update(
                self._wait_key(wait.call_id), _encoder.encode(wait), last=revision
            )
        except KeyWrongLastSequenceError:
            raise WaitConflict(f"the wait of {wait.call_id} changed meanwhile") from None

    async def index(self, envelope_ids: Sequence[str], call_id: str) -> None:
        """Record that the requests sent as `envelope_ids` belong to the wait of `call_id`."""
        await asyncio.gather(
            *(self._kv.put(self._request_key(eid), call_id.encode()) for eid in envelope_ids)
        )

    async def waiting_on(self, envelope_id: str) -> str | None:
        """The call whose wait sent request `envelope_id`, if this host sent it."""
        try:
            entry = await self._kv.get(self._request_key(envelope_id))
        except KeyNotFoundError:
            return None
        return entry.value.decode() if entry.value else None


async def open_wait_store(bus: BusHandle, host: str) -> WaitStore:
    """`host`'s waits, in its own bucket: created here when the host provisions (an open
    broker, where actors create what they use), else `parley provision` created it for this
    agent (least privilege: an agent may not create a stream).

    Raises:
        ConfigError: the bucket does not exist and this host may not create it.
    """
    if bus.settings.provision:
        await provision_agent(bus.js, bus.namespace, host, bus.settings)
    name = bus.namespace.agent_bucket("waits", host)
    try:
        kv = await bus.js.key_value(name)
    except BucketNotFoundError:
        raise ConfigError(
            f"bucket {name} (agent {host}'s waits) does not exist: run `parley provision` "
            "with this agent's settings file"
        ) from None
    return WaitStore(kv, host)
