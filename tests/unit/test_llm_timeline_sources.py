"""What a person's timeline shows of a model call's sources (actors/gate/_llm_timeline.py),
whatever the calling agent reported: an attack review's agent with no tools reported sixteen
sources it never read (`/etc/shadow`, `trusted`) with paths of 64 KB each, and every such call
put a 1 MB event on the person's timeline.

The envelope bounds what an agent may report (the gate refuses a longer one as malformed),
and the event cuts each field again for the person.
"""

from __future__ import annotations

import msgspec
import pytest

from actors.gate._llm_timeline import llm_event
from schemas import (
    Decision,
    DecodeError,
    LlmContext,
    LlmRequest,
    SourceProvenance,
    decode_envelope,
    encode,
    utc_now,
)

NOW = utc_now()


def _request(*sources: SourceProvenance) -> LlmRequest:
    return LlmRequest(
        id="call-1",
        created_at=NOW,
        request_id="call-1",
        session_id="s1",
        task_id="t1",
        step_id="call-1",
        model="m",
        messages=({"role": "user", "content": "hi"},),
        context_metadata=LlmContext(source_provenance=sources),
    )


def _decision() -> Decision:
    return Decision(
        id="d1",
        created_at=NOW,
        allowed=True,
        sender="planner",
        target="llm",
        envelope_id="call-1",
        envelope_kind="llm_request",
        trace_id="t",
    )


def test_the_event_shows_sixteen_sources_each_field_cut() -> None:
    forged = SourceProvenance(source_type="File.Read", path="/" + "x" * 1000, trust_level="trusted")
    event = llm_event(_decision(), _request(*[forged] * 40), "s1")
    assert event is not None
    sources = event.payload["sources"]
    assert len(sources) == 16
    assert all(len(field) <= 256 for source in sources for field in source.values())
    assert len(msgspec.json.encode(event)) < 16 * 1024


@pytest.mark.parametrize(
    "field", [{"path": "/" + "x" * 2000}, {"source_type": "s" * 300}, {"trust_level": "t" * 100}]
)
def test_an_envelope_reporting_longer_sources_is_malformed(field: dict[str, str]) -> None:
    honest = msgspec.to_builtins(_request(SourceProvenance(source_type="File.Read")))
    honest["context_metadata"]["source_provenance"][0].update(field)
    with pytest.raises(DecodeError):
        decode_envelope(msgspec.json.encode(honest))
    many = msgspec.to_builtins(_request(*[SourceProvenance(source_type="a")] * 65))
    with pytest.raises(DecodeError):
        decode_envelope(msgspec.json.encode(many))
    assert decode_envelope(encode(_request(SourceProvenance(source_type="a"))))
