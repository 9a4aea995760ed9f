"""A streamed answer's text, sent on to the principal that asked as it is written.

The response guardrails judge the whole answer once it is done (actors/llm/_actor.py); the
chunks go out before that, so they pass the same guardrails on the text written so far:

- the text so far is redacted, and only the part before its last whitespace is sent: a
  secret or a rule's match is written over several chunks, and the word still being written
  is held back until it ends (a token's delay, since a model writes words as tokens);
- when redacting changes text already sent (a match that spans a space), or a response deny
  rule matches, no more chunks go out: the answer itself (redacted, or denied) says the rest.

Every chunk sent is so a prefix, cut at whitespace, of the guarded text so far at some moment.
The guardrails read the WHOLE text each time (a rule's match can be long, so a window of the
last characters would miss one), and that read is what a stream costs: guarded at every piece,
an answer of N pieces costs O(N²) (200 KB in 4-character pieces: 50,000 guards of up to
200 KB, minutes of CPU), and a provider can make it cost any amount. So the text is guarded
again only when one of these holds:

- the text guarded last is shorter than `GUARD_EACH_PIECE_UNDER` (4096 characters): a short
  answer is shown piece by piece, as it is written, and its guarding costs at most about
  4096²/2 characters read whatever the answer's length;
- the text grew by `1/GUARD_GROWTH` (1/16) of what was guarded last: the texts guarded then
  grow geometrically, so together they are at most about 17 times the answer's length;
- new text came at least `GUARD_PAUSE_S` (0.25 s, monotonic) after the last guard ended, and
  at least `GUARD_PAUSE_PER_GUARD` (4) times as long as that guard took: a slow model's long
  answer is still shown as it comes, at its first piece a quarter second after the last
  guard, and these guards keep the gateway busy at most a fifth of the stream's time however
  long the text already is. Guards happen only as pieces come (no timer): text that came
  within the pause waits for the next piece, or the end, when the provider then stalls.

The answer's end (`finish`) sends the rest of the answer guarded whole, as before. The chunks
are only sent later and in larger pieces past 4 KB, never other text: a deny or a redaction
that changes text already sent still stops them. `guarded_chars` counts what the guardrails
read for the chunks, so the cost is observable (tests/integration/test_llm_chunk_cost.py).

Chunks go on core NATS to `Namespace.chunks(<who asked>)`, which only that principal may
follow (tools/natsconf): fire and forget, never stored, never retried. What they carry is also
read for the person whose session the call works in (actors/llm/_typing.py), so the person's
text passes the same guardrails.
"""

from __future__ import annotations

import logging
import time

import msgspec
from nats.aio.client import Client as NATS

from actors.llm._guardrails import guard
from actors.llm._typing import TypingSender
from schemas import Guardrails, LlmChunk

log = logging.getLogger("parley.llm.chunks")

__all__ = (
    "GUARD_EACH_PIECE_UNDER",
    "GUARD_GROWTH",
    "GUARD_PAUSE_PER_GUARD",
    "GUARD_PAUSE_S",
    "ChunkSender",
)

GUARD_EACH_PIECE_UNDER = 4096
"""Characters: while the text guarded last is shorter, each piece is guarded and shown."""
GUARD_GROWTH = 16
"""Past that, the text is guarded again once it grew by 1/16 of what was guarded last."""
GUARD_PAUSE_S = 0.25
"""Or once new text came this long after the last guard ended (a slow model's answer)..."""
GUARD_PAUSE_PER_GUARD = 4
"""...and at least this many times as long as that guard took."""

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
        self._pieces: list[str] = []  # joined only when guarded: `+=` copied the text each time
        self._written = 0
        self._sent = ""
        self._index = 0
        self._stopped = False
        self._guarded = 0  # the length of the text guarded last
        self._guarded_at = 0.0  # when that guard ended (monotonic)
        self._pause = GUARD_PAUSE_S
        self.guarded_chars = 0
        """The characters the guardrails read for the chunks so far: what guarding cost."""

    async def text(self, piece: str) -> None:
        """The provider wrote `piece`: send what of the text so far is settled, when due."""
        if self._stopped or not piece:
            return
        self._pieces.append(piece)
        self._written += len(piece)
        if not self._due():
            return
        written = "".join(self._pieces)
        self._pieces = [written]
        started = time.monotonic()
        guarded = guard(self._guardrails, "response", written, self._api)
        took = time.monotonic() - started
        self.guarded_chars += len(written)
        if guarded.denied_by is not None or not isinstance(guarded.value, str):
            self._stopped = True
            return
        shown = guarded.value
        settled = shown[: max(shown.rfind(" "), shown.rfind("\n")) + 1]
        await self._send_up_to(settled, done=False)
        self._guarded, self._guarded_at = len(written), time.monotonic()
        self._pause = max(GUARD_PAUSE_S, GUARD_PAUSE_PER_GUARD * took)

    def _due(self) -> bool:
        """Whether the text so far is to be guarded now (the module's docstring says why)."""
        if self._guarded < GUARD_EACH_PIECE_UNDER:
            return True
        if self._written - self._guarded >= self._guarded // GUARD_GROWTH:
            return True
        return time.monotonic() - self._guarded_at >= self._pause

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
