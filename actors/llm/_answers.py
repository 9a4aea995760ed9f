"""Each model call is answered at most once: the gateway's store of its answers.

The answer is stored (create-only) before it is published and before the request is
acknowledged. A redelivered request (the gateway killed mid-call, or after answering but
before its ack) therefore finds either its stored answer, which is published again under the
same envelope id (so JetStream drops a second copy that did arrive, and the gate admits one
answer per call), or nothing, and then the provider is asked again: nothing was answered, so
nothing can be answered twice. Of two replicas that both asked, the first to store wins and
the other publishes the stored answer instead of its own.

Keys are `run.<digest>` of who asked (the gate's word) and the request id.

The bucket is shared by every person's model calls and written by the gateway alone, so the
broker bounds it only whole: each answer kept is charged to the call's person and agent
(bus/_shares.py, `model_answer_bytes_per_person` and `_per_agent`), and a provider is asked
only while both have room, so one agent's calls cannot fill the store every call needs.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Final

from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from bus import ANSWER_TERMS, DAY_S, Payer, Quotas, Shares

log = logging.getLogger("parley.actors.llm")

_RECORD_OVERHEAD: Final = 160
"""What an answer costs the bucket besides its value: its key, subject and headers."""

__all__ = ("AnswerStore", "answer_key")


def answer_key(sender: str, request_id: str) -> str:
    identity = f"{sender}\x1f{request_id}"
    return "run." + hashlib.sha256(identity.encode()).hexdigest()[:48]


class AnswerStore:
    """The gateway's answers, in the `llm_runs` bucket (written by the gateway alone)."""

    def __init__(self, kv: KeyValue, shares: Shares | None = None) -> None:
        """`shares`: each person's and agent's share of the bucket (None: unbounded)."""
        self._kv = kv
        self._shares = shares

    @classmethod
    async def opened(cls, kv: KeyValue, quotas: Quotas) -> AnswerStore:
        """The store with the quotas' shares, counted for the bucket's age limit."""
        kept_s = (await kv.status()).ttl or 8 * DAY_S  # a bucket kept for ever: 8 days
        shares = Shares(
            kv,
            per_person=quotas.model_answer_share("person"),
            per_agent=quotas.model_answer_share("agent"),
            retention_s=kept_s,
            terms=ANSWER_TERMS,
        )
        return cls(kv, shares)

    async def room_for(self, payers: Sequence[Payer]) -> None:
        """Whether a new answer may be asked for and kept.

        Raises:
            ShareExceeded: a payer's share is used up.
        """
        if self._shares is not None:
            await self._shares.check_room(payers)

    async def find(self, key: str) -> bytes | None:
        """The stored answer (an encoded `llm_response`), if any."""
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            return None
        return entry.value or None

    async def keep(self, key: str, answer: bytes) -> tuple[bytes, bool]:
        """Store `answer` unless one is stored already; the one that counts, and whether it
        is this one (to `charge` once it is on its way)."""
        try:
            await self._kv.create(key, answer)
        except KeyWrongLastSequenceError:
            stored = await self.find(key)
            if stored is None:
                raise
            return stored, False
        return answer, True

    async def charge(self, payers: Sequence[Payer], answer: bytes) -> None:
        """Count a kept answer for `payers`, with what a record costs besides its value; a
        count that cannot be written is logged (it stays short), never in the call's way."""
        if self._shares is None:
            return
        try:
            await self._shares.charge_anyway(payers, len(answer) + _RECORD_OVERHEAD)
        except Exception as exc:
            log.warning("a model answer not counted", extra={"error": repr(exc)})
