"""Each model call is answered at most once: the gateway's store of its answers.

The answer is stored (create-only) before it is published and before the request is
acknowledged. A redelivered request (the gateway killed mid-call, or after answering but
before its ack) therefore finds either its stored answer, which is published again under the
same envelope id (so JetStream drops a second copy that did arrive, and the gate admits one
answer per call), or nothing, and then the provider is asked again: nothing was answered, so
nothing can be answered twice. Of two replicas that both asked, the first to store wins and
the other publishes the stored answer instead of its own.

Keys are `run.<digest>` of who asked (the gate's word) and the request id.
"""

from __future__ import annotations

import hashlib

from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

__all__ = ("AnswerStore", "answer_key")


def answer_key(sender: str, request_id: str) -> str:
    identity = f"{sender}\x1f{request_id}"
    return "run." + hashlib.sha256(identity.encode()).hexdigest()[:48]


class AnswerStore:
    """The gateway's answers, in the `llm_runs` bucket (written by the gateway alone)."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    async def find(self, key: str) -> bytes | None:
        """The stored answer (an encoded `llm_response`), if any."""
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            return None
        return entry.value or None

    async def keep(self, key: str, answer: bytes) -> bytes:
        """Store `answer` unless one is stored already; return the one that counts."""
        try:
            await self._kv.create(key, answer)
        except KeyWrongLastSequenceError:
            stored = await self.find(key)
            if stored is None:
                raise
            return stored
        return answer
