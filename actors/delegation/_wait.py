"""A caller's durable wait for the agents its brain asked: pure transitions over one record.

When a brain answers a call with requests (actors/delegation/_requests.py), its host stores a
`Wait` keyed by the call's envelope id before it sends a single request, and updates it with
compare-and-set as each answer (or deadline) comes in. Everything the host needs to go on lives
here, never only in memory: the call it is answering (bytes and headers, to answer it from any
replica), the finished rounds, the current round's requests and the results so far, the brain's
tokens, and once made, the final answer itself. So a host killed at any point resumes from the
record: a request is sent again under its recorded id (JetStream drops the copy), a result
recorded is never asked for again, a brain is asked again only for a round whose answer it
never stored, and a final answer stored is re-sent, never re-made.

These functions only compute; actors/delegation/_store.py reads and writes the record.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from msgspec import Struct

from actors.delegation._requests import AgentRequest, RequestResult, ToolRound, UseTool

__all__ = (
    "Wait",
    "aggregate_status",
    "answered",
    "expire",
    "finish_round",
    "next_deadline",
    "record_result",
    "restart_deadlines",
    "start_round",
)


class Wait(Struct, frozen=True, kw_only=True):
    """One call a host is answering, while the agents its brain asked are at work."""

    call_id: str
    """The envelope id of the call being answered: the record's key."""
    caller: str
    call: bytes
    """The call's envelope, as delivered."""
    headers: dict[str, str]
    """The call's delivery headers: the trace the answer and every request continue."""
    rounds: tuple[ToolRound, ...] = ()
    text: str = ""
    requests: tuple[AgentRequest, ...] = ()
    envelope_ids: tuple[str, ...] = ()
    """The current round's request envelopes' ids, in the order of `requests`."""
    expires_ms: tuple[int, ...] = ()
    results: dict[str, RequestResult] = {}
    """The current round's results so far, by request id."""
    tokens: int = 0
    """What the brain spent on this call so far."""
    started_ms: int = 0
    """When the host began answering the call (epoch ms): the answer's duration."""
    asking: str = ""
    """Who is asking the brain to go on from the complete round (a token per attempt)."""
    asking_until_ms: int = 0
    """Until when that claim holds; past it, another handler may take the step over."""
    final: bytes = b""
    """The answer to the call, once made: re-sent as is after a crash."""
    stepped_by: str = ""
    """The delivery (`<stream>:<sequence>`) whose handling stored the current round or the
    answer. That message is acked only once what the step sends is stored, so if it comes
    back it sends the step again: no other message knows the step may never have gone out."""

    @property
    def round_index(self) -> int:
        return len(self.rounds)

    @property
    def complete(self) -> bool:
        """Every request of the current round has its result."""
        return all(request.request_id in self.results for request in self.requests)

    @property
    def answer_status(self) -> str:
        """Seed 003's status of an answer made after the rounds so far."""
        return aggregate_status([result for done in self.rounds for result in done.results])

    @property
    def tools_used(self) -> tuple[str, ...]:
        """The tools the brain called over the rounds so far, first use first, each once:
        what the answer tells its caller (`AgentResponse.tools_used`), so a tool-using turn
        can be reviewed."""
        names = (
            request.capability
            if isinstance(request, UseTool)
            else str(request.__struct_config__.tag)
            for done in self.rounds
            for request in done.requests
        )
        return tuple(dict.fromkeys(names))

    def request_for(self, envelope_id: str) -> AgentRequest | None:
        """The request of the current round sent as `envelope_id`, if any."""
        for request, sent in zip(self.requests, self.envelope_ids, strict=True):
            if sent == envelope_id:
                return request
        return None


def start_round(
    wait: Wait,
    text: str,
    requests: Sequence[AgentRequest],
    envelope_ids: Sequence[str],
    now_ms: int,
    tokens: int,
) -> Wait:
    """A new round: the brain said `text` and asked `requests`, sent as `envelope_ids`."""
    if len(requests) != len(envelope_ids) or not requests:
        raise ValueError("a round needs one envelope id per request, and at least one request")
    return msgspec.structs.replace(
        wait,
        text=text,
        requests=tuple(requests),
        envelope_ids=tuple(envelope_ids),
        expires_ms=tuple(now_ms + request.deadline_ms for request in requests),
        results={},
        tokens=wait.tokens + tokens,
    )


def record_result(wait: Wait, envelope_id: str, result: RequestResult) -> Wait | None:
    """`wait` with the result of the request sent as `envelope_id`, or None when it is no
    request of the current round or already has its result (a late or repeated answer:
    ignored, as the brain has moved on or was told of the timeout)."""
    request = wait.request_for(envelope_id)
    if request is None or request.request_id in wait.results:
        return None
    if result.request_id != request.request_id:
        result = msgspec.structs.replace(result, request_id=request.request_id)
    return msgspec.structs.replace(wait, results={**wait.results, request.request_id: result})


def expire(wait: Wait, now_ms: int) -> Wait | None:
    """`wait` with a `timeout` result for every request past its deadline, or None if none is."""
    late = {
        request.request_id: RequestResult(
            request_id=request.request_id,
            status="timeout",
            content=f"Delegation timeout after {request.deadline_ms}ms",
        )
        for request, expires in zip(wait.requests, wait.expires_ms, strict=True)
        if request.request_id not in wait.results and expires <= now_ms
    }
    if not late:
        return None
    return msgspec.structs.replace(wait, results={**wait.results, **late})


def restart_deadlines(wait: Wait, now_ms: int) -> Wait:
    """`wait` with each unanswered request's deadline counted from `now_ms`: the round is
    being sent again after a crash, and may never have gone out before. A request's deadline
    is how long its caller waits for it once sent; counted from the first attempt, a host
    redelivered after its ack wait would time out requests that just left."""
    return msgspec.structs.replace(
        wait,
        expires_ms=tuple(
            expires if request.request_id in wait.results else now_ms + request.deadline_ms
            for request, expires in zip(wait.requests, wait.expires_ms, strict=True)
        ),
    )


def next_deadline(wait: Wait) -> int | None:
    """When the next request still unanswered runs out of time (epoch ms)."""
    open_ = [
        expires
        for request, expires in zip(wait.requests, wait.expires_ms, strict=True)
        if request.request_id not in wait.results
    ]
    return min(open_) if open_ else None


def finish_round(wait: Wait) -> Wait:
    """The current (complete) round moved into `rounds`, results in the order of requests."""
    if not wait.complete:
        raise ValueError("the round still waits for results")
    done = ToolRound(
        text=wait.text,
        requests=wait.requests,
        results=tuple(wait.results[request.request_id] for request in wait.requests),
    )
    return msgspec.structs.replace(
        wait,
        rounds=(*wait.rounds, done),
        text="",
        requests=(),
        envelope_ids=(),
        expires_ms=(),
        results={},
        asking="",
        asking_until_ms=0,
    )


def aggregate_status(results: Sequence[RequestResult]) -> str:
    """Seed 003's fan-out status: success when every answer succeeded, partial when some
    did (or one was only partial), failed when none did."""
    if not results:
        return "success"
    if all(result.status == "success" for result in results):
        return "success"
    if any(result.ok for result in results):
        return "partial"
    return "failed"


def answered(wait: Wait, final: bytes, tokens: int, stepped_by: str) -> Wait:
    """The wait holding its call's answer, and only what an answered call still needs: its
    headers, to send the answer again to a redelivered call or message. It is kept the waits'
    retention (2 days) after its last write, and the call, the rounds and their results it
    carried (the caller's goal and transcript, up to a message's size each) let every caller
    of this agent fill its bucket, at its rate, for every other caller: no path reads them once
    `final` is set (each looks at `final` first)."""
    return msgspec.structs.replace(
        wait,
        final=final,
        tokens=tokens,
        stepped_by=stepped_by,
        call=b"",
        rounds=(),
        text="",
        requests=(),
        envelope_ids=(),
        expires_ms=(),
        results={},
    )
