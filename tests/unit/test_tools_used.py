"""An agent's answer names the tools its turn used (`AgentResponse.tools_used`): the host fills
it from its brain's tool loop, and the wire field is optional and bounded, so answers from
hosts that predate it still decode and a flood of names is refused."""

from __future__ import annotations

import msgspec
import pytest

from actors.delegation import CallSubAgent, Delegate, RequestResult, ToolRound, Wait
from schemas import (
    AgentResponse,
    DecodeError,
    Reply,
    SubAgentArgs,
    decode_envelope,
    encode,
    new_id,
    utc_now,
)


def _round(*requests: Delegate | CallSubAgent) -> ToolRound:
    results = tuple(
        RequestResult(request_id=r.request_id, status="success", content="ok") for r in requests
    )
    return ToolRound(requests=requests, results=results)


def test_the_host_names_each_tool_its_brain_called_once_first_use_first() -> None:
    rounds = (
        _round(
            CallSubAgent(request_id="a", args=SubAgentArgs(agent_name="tester", task="t")),
            Delegate(request_id="b", target_employee="coder", objective="o"),
        ),
        _round(Delegate(request_id="c", target_employee="reviewer", objective="o")),
    )
    wait = Wait(call_id="call", caller="router", call=b"", headers={}, rounds=rounds)
    assert wait.tools_used == ("call_sub_agent", "delegate_to_agent")
    assert Wait(call_id="call", caller="router", call=b"", headers={}).tools_used == ()


def _response(**fields: object) -> AgentResponse:
    return AgentResponse(
        id=new_id(),
        created_at=utc_now(),
        sender="local",
        text="hi",
        call_id="c-1",
        reply=Reply(message="hi"),
        **fields,  # type: ignore[arg-type]
    )


def test_tools_used_is_optional_on_the_wire_and_bounded() -> None:
    plain = msgspec.json.decode(encode(_response()))
    del plain["tools_used"]
    old = decode_envelope(msgspec.json.encode(plain))
    assert isinstance(old, AgentResponse) and old.tools_used == ()
    used = decode_envelope(encode(_response(tools_used=("delegate_to_agent",))))
    assert isinstance(used, AgentResponse) and used.tools_used == ("delegate_to_agent",)
    too_many = msgspec.json.decode(encode(_response()))
    too_many["tools_used"] = [f"tool-{n}" for n in range(33)]
    with pytest.raises(DecodeError):
        decode_envelope(msgspec.json.encode(too_many))
    too_many["tools_used"] = ["x" * 201]  # a name, never a payload
    with pytest.raises(DecodeError):
        decode_envelope(msgspec.json.encode(too_many))
    capability = decode_envelope(encode(_response(tools_used=("File.Read", "Mcp.notes.add"))))
    assert isinstance(capability, AgentResponse)
    assert capability.tools_used == ("File.Read", "Mcp.notes.add")
