"""What the gate tells the LLM gateway about whose session a model call works in
(actors/gate/_roles.py): the person and session from its own records, and only for a person."""

from __future__ import annotations

from typing import cast

import msgspec
from nats.js.kv import KeyValue

from actors.gate._records import Level, Position
from actors.gate._roles import told_to_receiver
from bus import OWNER, SESSION, BundleStore
from schemas import LlmRequest, ProfilePolicy, utc_now
from tests.support.gate import make_bundle


def _bundles() -> BundleStore:
    store = BundleStore(cast(KeyValue, None), {}, "t")
    profiles = {
        "person-ana": ProfilePolicy(speaks_for_person=True),
        "gpt": ProfilePolicy(),
        "router": ProfilePolicy(),
    }
    store.bundle = msgspec.structs.replace(make_bundle(1), profiles=profiles)
    return store


def _told(origin: str, session_id: str) -> dict[str, str]:
    request = LlmRequest(
        id="r1",
        created_at=utc_now(),
        request_id="r1",
        session_id="what-the-agent-claims",
        task_id="t",
        step_id="r1",
        model="m",
        messages=({"role": "user", "content": "hi"},),
    )
    position = Position(
        envelope_id="r1",
        trace_id="trace-1",
        origin=origin,
        sender="gpt",
        target="llm",
        kind="llm_request",
        levels=(Level(holder=origin), Level(holder="gpt"), Level(holder="llm")),
        session_id=session_id,
    )
    return told_to_receiver(_bundles(), request, position)


def test_a_model_call_in_a_persons_session_names_that_person_and_session() -> None:
    told = _told("person-ana", "s-ana")
    assert (told[OWNER], told[SESSION]) == ("person-ana", "s-ana")


def test_a_model_call_outside_a_persons_session_names_nobody() -> None:
    for origin, session in (("router", "s-1"), ("gpt", "s-1"), ("person-ana", ""), ("nobody", "s")):
        told = _told(origin, session)
        assert OWNER not in told and SESSION not in told, (origin, session)
