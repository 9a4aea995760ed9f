"""A delegate's reply (issue 15, item 2): seed 003's response fields beside seed 001's message,
read only when the call is a delegation, and asked for with a schema that matches the struct."""

from __future__ import annotations

import dataclasses
import json

import msgspec
import pytest
from pydantic import ValidationError

from actors.agent._prompt import BrainCall
from actors.agent._reply import delegate_reply_json_schema, interpret_reply, reply_schema_for
from actors.agent.brains._scripted import ScriptedTurn
from schemas import DelegateReply

REPORT = {
    "message": "Two libraries do this.",
    "summary": "two libraries",
    "new_facts": ["csvkit streams rows"],
    "used_sources": [{"owner_scope": "web", "source_id": "pypi:csvkit"}],
    "artifacts": [{"type": "id", "value": 7}],
    "confidence": 80,
    "requires_followup": True,
}


def test_a_delegate_s_fields_are_read_when_the_call_is_a_delegation() -> None:
    read = interpret_reply(json.dumps(REPORT), delegate=True)
    assert not read.malformed and read.reply.message == "Two libraries do this."
    assert read.report is not None
    assert read.report.new_facts == ("csvkit streams rows",) and read.report.confidence == 80
    assert read.report.used_sources[0].source_id == "pypi:csvkit"


def test_the_same_fields_in_a_session_s_reply_break_seed_001_s_contract() -> None:
    read = interpret_reply(json.dumps(REPORT))
    assert read.malformed and read.report is None


def test_a_delegate_may_answer_in_seed_001_s_shape_alone() -> None:
    read = interpret_reply('{"message": "done", "final": true}', delegate=True)
    assert not read.malformed and read.report is not None and read.report.message == "done"
    handed = interpret_reply(
        '{"message": "done", "handoff": {"to": "x", "task": "t"}}', delegate=True
    )
    assert not handed.malformed and handed.report is None


@pytest.mark.parametrize(
    "bad",
    [
        {"confidence": 150},
        {"summary": "x" * 201},
        {"artifacts": [{"type": "video", "value": 1}]},
        {"new_facts": ["f"] * 33},
        {"mood": "good"},
    ],
)
def test_a_delegate_s_field_out_of_bounds_is_a_malformed_reply(bad: dict[str, object]) -> None:
    read = interpret_reply(json.dumps({"message": "m", **bad}), delegate=True)
    assert read.malformed and read.report is None and read.reply.message.startswith("{")


def test_the_schema_asked_for_names_exactly_the_struct_s_fields() -> None:
    schema = delegate_reply_json_schema()
    assert set(schema["properties"]) == set(DelegateReply.__struct_fields__)
    assert schema["required"] == ["message"] and schema["additionalProperties"] is False
    assert msgspec.json.decode(json.dumps(REPORT), type=DelegateReply).summary == "two libraries"
    assert reply_schema_for("delegation_request") == schema
    for kind in ("agent_call", "sub_agent_call"):
        assert "handoff" in reply_schema_for(kind, ("gpt",))["properties"]


def test_a_scripted_report_is_checked_when_the_script_loads() -> None:
    with pytest.raises(ValidationError, match="not seed 003 response fields"):
        ScriptedTurn(message="m", report={"mood": "good"})
    turn = ScriptedTurn(message="m", report={"confidence": 80})
    asked = BrainCall(
        kind="delegation_request", envelope_id="e", call_id="c", session_id="s", goal="g"
    )
    assert json.loads(turn.text_for(asked, "coder")) == {"message": "m", "confidence": 80}
    in_a_session = dataclasses.replace(asked, kind="agent_call")
    assert json.loads(turn.text_for(in_a_session, "coder")) == {"message": "m"}
