"""A person delegating to an agent through the real gate, for the agents-calling-agents tests.

The test plays the person (`cli`): it submits a `delegation_request` on `parley.submit.cli`
and reads what the gate delivers back on `parley.deliver.cli`.
"""

from __future__ import annotations

from nats.js import JetStreamContext

from bus import MSG_ID
from schemas import (
    DelegationConstraints,
    DelegationRequest,
    DelegationResponse,
    HandoffData,
    Namespace,
    decode_envelope,
    encode,
    new_id,
    utc_now,
)

__all__ = ("delegate_as_person", "person_request", "submit_as_person")


def person_request(
    objective: str,
    *,
    target: str = "planner",
    text: str = "",
    facts: tuple[str, ...] = (),
    deadline_ms: int = 60_000,
    session_id: str | None = None,
) -> DelegationRequest:
    """A person's delegation of `objective` to `target` (a generous deadline by default)."""
    return DelegationRequest(
        id=new_id(),
        created_at=utc_now(),
        request_id=new_id(),
        origin_employee="cli",
        target_employee=target,
        user_id="",
        parent_session_id=session_id or new_id(),
        objective=objective,
        input=text,
        constraints=DelegationConstraints(deadline_ms=deadline_ms),
        handoff_data=HandoffData(facts=facts),
    )


async def submit_as_person(js: JetStreamContext, ns: Namespace, request: DelegationRequest) -> None:
    await js.publish(ns.submit("cli"), encode(request), headers={MSG_ID: request.id})


async def delegate_as_person(
    js: JetStreamContext, ns: Namespace, request: DelegationRequest, timeout: float = 60.0
) -> DelegationResponse:
    """Submit `request` as the person; the answer to it, as the gate delivered it."""
    inbox = await js.pull_subscribe(ns.deliver("cli"), durable="cli", stream=ns.stream("deliver"))
    await submit_as_person(js, ns, request)
    while True:
        (msg,) = await inbox.fetch(1, timeout=timeout)
        await msg.ack_sync()
        answer = decode_envelope(msg.data)
        if isinstance(answer, DelegationResponse) and answer.request_id == request.request_id:
            return answer
