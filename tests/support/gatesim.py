"""The gate's pure core driven without a bus: what actors/gate/_actor.py does, minus JetStream.

Positions and counters live in one in-memory ledger; `submit` plans and decides one envelope
with the gate's own batch functions (actors/gate/_batch.py), records the admitted envelope's
position, and returns the verdict. The answers built below name no call of their own: `submit`
makes one name the call it answers, as an agent host copies the ids from its call, unless a
test forges them (`as_is=True`). Tests of the policy rules and the hypothesis property run
on it; the integration tests run the real gate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from msgspec import structs

from actors.gate._batch import decide_batch, plan_batch
from actors.gate._decide import Allow, Ledger
from actors.gate._plan import Deny, Submission
from actors.gate._records import Position, position_key
from bus import CAUSATION_ID
from schemas import (
    AgentCall,
    AgentResponse,
    AnyEnvelope,
    DelegationConstraints,
    DelegationRequest,
    DelegationResponse,
    HumanMessage,
    PolicyBundle,
    ProfilePolicy,
    Reply,
    SubAgentArgs,
    SubAgentCall,
    SubAgentResult,
    TokenUsage,
    new_id,
    utc_now,
)

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)


def bundle(**profiles: ProfilePolicy | dict[str, Any]) -> PolicyBundle:
    built = {
        name: p if isinstance(p, ProfilePolicy) else ProfilePolicy(**p)
        for name, p in profiles.items()
    }
    return PolicyBundle(
        schema_version="1.0",
        version=1,
        tenant_id="t",
        expires_at=NOW + timedelta(days=1),
        profiles=built,
    )


@dataclass
class GateSim:
    """Plans and decides like the gate, with every record in memory."""

    policy: PolicyBundle | None
    now_ms: int = NOW_MS
    ledger: Ledger = field(default_factory=Ledger)

    def submit(
        self,
        sender: str,
        envelope: AnyEnvelope,
        cause: str = "",
        claims: dict[str, str] | None = None,
        *,
        as_is: bool = False,
    ) -> Allow | Deny:
        """Plan and decide `envelope` as a batch of one, through the gate's own batch
        functions, and record the position of an admitted one."""
        headers = dict(claims or {})
        if cause:
            headers[CAUSATION_ID] = cause
            if not as_is:
                envelope = self._naming_its_call(envelope, cause)
        sub = Submission(envelope, sender, cause, headers, self.now_ms)
        causes = (
            {position_key(cause): self.ledger.get(position_key(cause), Position)} if cause else {}
        )
        routes = plan_batch([sub], [None], causes, self.policy, "no bundle")
        (judged,) = decide_batch([sub], routes, causes, self.ledger, self.policy)
        outcome = judged.outcome
        assert not isinstance(outcome, Position)
        if isinstance(outcome, Allow):
            self.ledger.put(position_key(envelope.id), outcome.route.position)
        return outcome

    def _naming_its_call(self, envelope: AnyEnvelope, cause: str) -> AnyEnvelope:
        """`envelope`, if an answer, naming the call its sender was given (the innermost call
        of its cause's chain), as the gate recorded that call."""
        position = self.ledger.get(position_key(cause), Position)
        if position is None or len(position.levels) < 2:
            return envelope
        level = position.levels[-1]
        session = level.answer_session_id or None
        match envelope:
            case AgentResponse():
                return structs.replace(envelope, call_id=level.answer_call_id, session_id=session)
            case DelegationResponse():
                return structs.replace(
                    envelope, request_id=level.answer_call_id, child_session_id=session
                )
            case SubAgentResult():
                return structs.replace(envelope, call_id=level.answer_call_id)
            case _:
                return envelope

    def position(self, envelope_id: str) -> Position:
        found = self.ledger.get(position_key(envelope_id), Position)
        assert found is not None
        return found


def human(target: str = "router", user_id: str = "") -> HumanMessage:
    return HumanMessage(
        id=new_id(), created_at=utc_now(), text="hi", call_id=new_id(), target=target,
        user_id=user_id,
    )  # fmt: skip


def call(target: str, goal: str = "g", user_id: str = "") -> AgentCall:
    return AgentCall(
        id=new_id(), created_at=utc_now(), target=target, call_id=new_id(), goal=goal,
        user_id=user_id,
    )  # fmt: skip


def response(
    sender: str, text: str = "ok", target: str | None = None, tokens: int = 0
) -> AgentResponse:
    return AgentResponse(
        id=new_id(),
        created_at=utc_now(),
        sender=sender,
        target=target or "router",
        text=text,
        call_id=new_id(),
        reply=Reply(message=text),
        token_usage=TokenUsage(total=tokens),
    )


def delegation(
    origin: str,
    target: str,
    objective: str = "extract receipt",
    *,
    max_tokens: int = 1200,
    deadline_ms: int = 15000,
    user_id: str = "u1",
) -> DelegationRequest:
    return DelegationRequest(
        id=new_id(),
        created_at=utc_now(),
        request_id=new_id(),
        origin_employee=origin,
        target_employee=target,
        user_id=user_id,
        parent_session_id="ps",
        objective=objective,
        input="receipt.jpg",
        constraints=DelegationConstraints(max_tokens=max_tokens, deadline_ms=deadline_ms),
    )


def delegation_done(sender: str) -> DelegationResponse:
    return DelegationResponse(
        id=new_id(),
        created_at=utc_now(),
        request_id=new_id(),
        target_employee=sender,
        summary="done",
        result="done",
        status="success",
    )


def sub_agent(
    caller: str,
    target: str,
    *,
    task: str = "write tests",
    tools: tuple[str, ...] | None = None,
    nested: bool = False,
) -> SubAgentCall:
    return SubAgentCall(
        id=new_id(),
        created_at=utc_now(),
        call_id=new_id(),
        caller=caller,
        session_id="s",
        args=SubAgentArgs(
            agent_name=target, task=task, allowed_tools=tools, allow_nested_calls=nested
        ),
    )


def sub_agent_done(sender: str) -> SubAgentResult:
    return SubAgentResult(
        id=new_id(), created_at=utc_now(), call_id=new_id(), agent_name=sender, success=True,
        output="ok",
    )  # fmt: skip
