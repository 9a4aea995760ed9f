"""A person's delegations (seed 003) from the console: the requests it sent, and their answers.

A delegation is the envelope `parley delegate` sends: a `delegation_request` the person
submits as a root (its trace is its own id), one per agent (seed 003's parallel mode when
there are several), all in one session. The answer, a `delegation_response` or an `error`
about the request (the agent failed, or the gate refused it), comes back on the person's own
deliver subject, read through the durable named after the person that `parley up` provisions
(a person may not create a consumer). A request with no answer by its deadline (plus the
margin the answer needs to cross the gate) is seed 003's "Delegation timeout after Nms".

`DelegationInbox` reads that durable and hands each answer to whoever waits on its request;
`delegation_result` is the JSON the page is shown for one request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from actors.delegation import answered_request
from bus import Input, Settings
from schemas import DecodeError, DelegationResponse, Error, Namespace, decode_envelope

__all__ = ("ANSWER_MARGIN_S", "Answer", "DelegationInbox", "delegation_result")

log = logging.getLogger("parley.console.delegations")

ANSWER_MARGIN_S: Final = 2.0
"""Past a request's deadline: the answer made at the deadline still crosses the gate."""
_FETCH_WAIT_S: Final = 5.0

Answer = DelegationResponse | Error


def delegation_result(target: str, answer: Answer | None, deadline_ms: int) -> dict[str, Any]:
    """One request's outcome in seed 003's words: status, the text, tokens and time (None:
    no answer by the deadline)."""
    if answer is None:
        text = f"Delegation timeout after {deadline_ms}ms"
        return {"target": target, "status": "timeout", "result": text, "tokens": 0}
    if isinstance(answer, Error):
        text = f"{answer.code}: {answer.message}"
        return {"target": target, "status": "failed", "result": text, "tokens": 0}
    shown = answer.result or answer.summary
    if answer.error:
        shown = f"{shown}\nerror: {answer.error}".strip()
    return {
        "target": target,
        "status": answer.status,
        "result": shown,
        "tokens": answer.token_usage.total,
        "durationMs": answer.duration_ms,
    }


class DelegationInbox:
    """The person's durable on the deliver stream, read one answer at a time."""

    def __init__(self, js: JetStreamContext, ns: Namespace, principal: str) -> None:
        self._js, self._ns, self._principal = js, ns, principal
        self._waiting: dict[str, Callable[[Answer], None]] = {}
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def open(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self, settings: Settings) -> None:
        """Bind the durable `parley up` provisioned (none: delegations are unavailable, and
        StartTask says so; nothing else of the console depends on it)."""
        spec = Input.deliver(self._ns, self._principal)
        try:
            await self._js.consumer_info(spec.stream, spec.durable)
        except NotFoundError:
            log.warning(
                "no durable to read delegation answers from",
                extra={"person": self._principal, "durable": spec.durable},
            )
            return
        sub = await self._js.pull_subscribe_bind(durable=spec.durable, stream=spec.stream)
        self._task = asyncio.create_task(self._read(sub))

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def wait_for(self, request_id: str, on_answer: Callable[[Answer], None]) -> None:
        self._waiting[request_id] = on_answer

    def forget(self, request_id: str) -> None:
        self._waiting.pop(request_id, None)

    async def _read(self, sub: JetStreamContext.PullSubscription) -> None:
        # Not `while True`: on Python 3.11 nats-py's fetch (asyncio.wait_for inside) can turn
        # a cancellation that meets its own timeout into TimeoutError, and the loop would go
        # on, holding `stop()` for ever.
        while not self._stopping:
            try:
                # One at a time: nats-py's fetch of several can hold an answer back until its
                # timeout (docs/benchmarks.md).
                messages = await sub.fetch(1, timeout=_FETCH_WAIT_S)
            except TimeoutError:
                continue
            for msg in messages:
                self._deliver(msg.data)
                await msg.ack()  # ours, late, or someone else's: read once either way

    def _deliver(self, data: bytes) -> None:
        try:
            envelope = decode_envelope(data)
        except DecodeError as exc:
            log.warning("undecodable delegation answer", extra={"error": str(exc)})
            return
        request_id = answered_request(envelope)
        if not isinstance(envelope, DelegationResponse | Error) or request_id is None:
            return
        on_answer = self._waiting.pop(request_id, None)
        if on_answer is not None:
            on_answer(envelope)
