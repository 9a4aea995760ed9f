"""A streamed answer's text, sent on to the principal that asked as it is written.

The response guardrails judge the whole answer once it is done (actors/llm/_actor.py); the
chunks go out before that, so they pass the same guardrails on the text written so far:

- the text so far is redacted, and only the part before its last whitespace is sent: a
  secret or a rule's match is written over several chunks, and the word still being written
  is held back until it ends (a token's delay, since a model writes words as tokens);
- when redacting changes text already sent (a match that spans a space), or a response deny
  rule matches, no more chunks go out: the answer itself (redacted, or denied) says the rest.

Chunks go on core NATS to `Namespace.chunks(<who asked>)`, which only that principal may
follow (tools/natsconf): fire and forget, never stored, never retried. What they carry is also
read for the person whose session the call works in (actors/llm/_typing.py), so the person's
text passes the same guardrails.
"""

from __future__ import annotations

import logging

import msgspec
from nats.aio.client import Client as NATS

from actors.llm._guardrails import guard
from actors.llm._typing import TypingSender
from schemas import Guardrails, LlmChunk

log = logging.getLogger("parley.llm.chunks")

__all__ = ("ChunkSender",)

_ENCODER = msgspec.json.Encoder()


class ChunkSender:
    """The chunks of one model call's answer."""

    def __init__(
        self,
        nc: NATS,
        subject: str,
        request_id: str,
        guardrails: Guardrails,
        api: str,
        typing: TypingSender | None = None,
    ) -> None:
        self._nc, self._subject, self._request_id = nc, subject, request_id
        self._typing = typing
        self._guardrails, self._api = guardrails, api
        self._written = ""
        self._sent = ""
        self._index = 0
        self._stopped = False

    async def text(self, piece: str) -> None:
        """The provider wrote `piece`: send what of the text so far is settled."""
        self._written += piece
        if self._stopped:
            return
        guarded = guard(self._guardrails, "response", self._written, self._api)
        if guarded.denied_by is not None or not isinstance(guarded.value, str):
            self._stopped = True
            return
        shown = guarded.value
        settled = shown[: max(shown.rfind(" "), shown.rfind("\n")) + 1]
        await self._send_up_to(settled, done=False)

    async def finish(self, text: str | None) -> None:
        """The answer is done: `text` is its guarded text (None: it is not answered with text,
        it failed or was denied). Send the rest, and say it is done."""
        if text is not None and not self._stopped:
            await self._send_up_to(text, done=True)
        else:
            await self._publish("", done=True)

    async def _send_up_to(self, settled: str, *, done: bool) -> None:
        if not settled.startswith(self._sent):
            self._stopped = True  # redaction changed what was sent: the answer says the rest
            if done:
                await self._publish("", done=True)
            return
        new = settled[len(self._sent) :]
        if new or done:
            self._sent = settled
            await self._publish(new, done=done)

    async def _publish(self, text: str, *, done: bool) -> None:
        chunk = LlmChunk(request_id=self._request_id, index=self._index, text=text, done=done)
        self._index += 1
        try:
            await self._nc.publish(self._subject, _ENCODER.encode(chunk))
            if self._typing is not None:
                await self._typing.text(text, done=done)
        except Exception as exc:  # best effort: a failed chunk must never fail the call
            # (raised, it left the call before its answer was kept, and the redelivered request
            # called the provider again)
            self._stopped = True
            log.warning("chunks stopped: a publish failed", extra={"error": repr(exc)})
