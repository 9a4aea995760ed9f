"""The console's pure parts: the token store, sign-ins, a session's record, `parley console
token`'s refusals and `parley up`'s people."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from actors.console import TokenStore, TokenStoreError, principal_of
from actors.console._timeline import SessionRecord
from actors.console._tokens import SignIns
from schemas import Decision, ErrorCode, SessionEvent
from tools._local import console_people
from tools.cli import main

T0 = datetime(2026, 11, 25, tzinfo=UTC)


def test_a_token_is_stored_as_its_hash_only_and_owner_only(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "console" / "tokens.json")
    token = store.issue("alice")
    text = store.path.read_text()
    assert token not in text
    assert (
        json.loads(text)["people"]["alice"]["sha256"] == hashlib.sha256(token.encode()).hexdigest()
    )
    assert store.path.stat().st_mode & 0o777 == 0o600
    assert store.person_of(token) == "alice"
    assert store.person_of(token + "x") is None
    assert store.person_of("") is None


def test_issuing_again_revokes_the_old_token(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "tokens.json")
    old = store.issue("alice")
    bobs = store.issue("bob")
    new = store.issue("alice")
    assert store.person_of(old) is None
    assert store.person_of(new) == "alice"
    assert store.person_of(bobs) == "bob"
    assert store.people() == ("alice", "bob")


@pytest.mark.parametrize("name", ["", "Alice", "a.b", "a*", "x" * 58, "../etc"])
def test_a_name_that_is_no_subject_token_is_refused(name: str, tmp_path: Path) -> None:
    with pytest.raises(TokenStoreError, match="invalid person name"):
        TokenStore(tmp_path / "tokens.json").issue(name)
    assert not (tmp_path / "tokens.json").exists()


def test_a_malformed_store_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text('{"people": [1, 2]}')
    with pytest.raises(TokenStoreError, match="cannot read the console tokens"):
        TokenStore(path).people()


def test_a_principal_is_person_dash_name() -> None:
    assert principal_of("alice") == "person-alice"


def test_sign_ins_expire_and_close() -> None:
    sign_ins = SignIns()
    token = sign_ins.open("alice")
    assert sign_ins.person_of(token) == "alice"
    sign_ins.close(token)
    assert sign_ins.person_of(token) is None
    expired = SignIns(ttl_s=-1.0)
    assert expired.person_of(expired.open("bob")) is None


def _event(event_id: str, event_type: Any, **fields: Any) -> SessionEvent:
    return SessionEvent(
        id=event_id, created_at=T0, session_id="s1", event_type=event_type, **fields
    )


def test_a_record_folds_events_once_each() -> None:
    record = SessionRecord("s1", T0)
    created = _event(
        "e1",
        "session_created",
        round=0,
        payload={
            "goal": "<b>g</b>",
            "mode": "collaborate",
            "participants": ["gpt"],
            "max_rounds": 4,
        },
    )
    assert record.apply(created) is not None
    assert record.apply(created) is None  # a redelivered event is not shown twice
    step = record.apply(
        _event("e2", "step_completed", round=2, speaker="gpt", payload={"message": "m"})
    )
    assert step is not None
    assert step["payload"] == {"message": "m", "round": 2, "speaker": "gpt", "stopReason": None}
    assert (record.goal, record.round, record.max_rounds, record.state) == (
        "<b>g</b>",
        2,
        4,
        "running",
    )
    record.apply(_event("e3", "session_canceled", round=2, stop_reason="canceled"))
    assert record.summary()["state"] == "canceled"
    assert [e["eventId"] for e in record.state_of()["events"]] == ["e1", "e2", "e3"]


def test_a_refusal_by_the_gate_ends_a_submitted_session() -> None:
    record = SessionRecord("s1", T0, state="submitted")
    decision = Decision(
        id="d1",
        created_at=T0,
        allowed=False,
        code=ErrorCode.UNAUTHORIZED,
        rule="profile",
        message="no profile",
        sender="person-alice",
        envelope_id="m1",
        envelope_kind="human_message",
        trace_id="m1",
    )
    record.refuse(decision)
    assert record.state == "refused"
    assert record.error is not None
    assert record.error["code"] == "UNAUTHORIZED"


def test_the_token_command_refuses_a_bad_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens = tmp_path / "tokens.json"
    assert main(["console", "token", "--person", "Bad.Name", "--tokens", str(tokens)]) == 2
    assert "invalid person name" in capsys.readouterr().err
    assert main(["console", "token", "--person", "carol", "--tokens", str(tokens)]) == 0
    printed = capsys.readouterr().out.strip()
    assert TokenStore(tokens).person_of(printed) == "carol"


def test_parley_up_gives_everyone_with_a_token_a_principal(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    assert console_people(tokens) == ()
    TokenStore(tokens).issue("bob")
    TokenStore(tokens).issue("alice")
    assert console_people(tokens) == ("person-alice", "person-bob")
