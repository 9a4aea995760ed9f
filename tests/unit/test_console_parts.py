"""The console's pure parts: the token store, sign-ins, a session's record (a collaboration,
an orchestrated session, a delegation), the methods' params, a delegation's result, a trace
tree, `parley console token`'s refusals and `parley up`'s people."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from actors.console import TokenStore, TokenStoreError, principal_of
from actors.console._audit import trace_tree
from actors.console._delegations import delegation_result
from actors.console._options import ConsoleOptions
from actors.console._params import ApproveParams, CreateSessionParams
from actors.console._people import People
from actors.console._person import KEPT_SESSIONS, PersonLink
from actors.console._rpc import RpcSession
from actors.console._timeline import SessionRecord
from actors.console._tokens import SignIns
from bus import load_settings
from schemas import AuditRecord, Decision, Error, ErrorCode, SessionEvent
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


def _refusal() -> Decision:
    return Decision(
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


def test_a_refusal_by_the_gate_ends_a_submitted_session() -> None:
    record = SessionRecord("s1", T0, state="submitted")
    record.refuse(_refusal())
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
    tokens, clients = tmp_path / "tokens.json", tmp_path / "a2a" / "tokens.json"
    assert console_people(tokens, clients) == ()
    TokenStore(tokens).issue("bob")
    TokenStore(tokens).issue("alice")
    assert console_people(tokens, clients) == ("person-alice", "person-bob")
    # An A2A client is a person too (the edge acts as it): a newcomer's walk found none had
    # credentials under `parley up`, restarted or not. One with both tokens is one principal.
    TokenStore(clients).issue("acme")
    TokenStore(clients).issue("bob")
    assert console_people(tokens, clients) == ("person-alice", "person-bob", "person-acme")


def test_an_orchestrated_record_keeps_its_settings_phase_and_pending_drafts() -> None:
    record = SessionRecord("s1", T0)
    orchestrated = {"orchestrated": True}
    record.apply(
        _event(
            "e1",
            "session_created",
            round=1,
            payload={
                **orchestrated,
                "state": "waiting_local",
                "mode": "manual",  # an orchestrated event's `mode` is the orchestration mode
                "objective": "negotiate",
                "local_agent": "claude",
                "shared_agent": "gpt",
                "orchestration_mode": "manual",
                "participants": ["claude", "gpt"],
                "max_rounds": 5,
                "max_turns": 5,
            },
        )
    )
    assert (record.mode, record.goal, record.phase) == ("orchestrate", "negotiate", "waiting_local")
    assert record.orchestration is not None
    assert (record.orchestration["localAgent"], record.orchestration["maxTurns"]) == ("claude", 5)
    asked = {**orchestrated, "state": "ready_to_send", "approval_id": "a1", "draft": "d"}
    record.apply(_event("e2", "approval_requested", round=1, payload={**asked, "reasons": ["r"]}))
    assert record.summary()["pendingApprovals"] == [
        {"approvalId": "a1", "draft": "d", "reasons": ["r"], "round": 1}
    ]
    resolved = {**orchestrated, "state": "waiting_remote", "approval_id": "a1"}
    record.apply(_event("e3", "approval_resolved", round=1, payload=resolved))
    assert record.pending == {}
    record.apply(
        _event("e4", "approval_requested", round=2, payload={**asked, "approval_id": "a2"})
    )
    ended = {**orchestrated, "state": "stopped"}
    record.apply(_event("e5", "session_canceled", round=2, stop_reason="stopped", payload=ended))
    assert (record.state, record.phase, record.pending) == ("canceled", "stopped", {})


def test_a_delegation_ends_with_its_last_answer() -> None:
    record = SessionRecord("s1", T0, mode="delegate", participants=("gpt", "claude"))
    record.delegations = {
        "r1": {"requestId": "r1", "target": "gpt", "status": "pending"},
        "r2": {"requestId": "r2", "target": "claude", "status": "pending"},
    }
    record.state = "submitted"
    record.settle_delegation("r1", {"requestId": "r1", "target": "gpt", "status": "success"})
    assert record.state == "submitted"  # one still pending
    record.settle_delegation("r2", {"requestId": "r2", "target": "claude", "status": "timeout"})
    assert record.state == "failed"
    assert [d["status"] for d in record.summary()["delegations"]] == ["success", "timeout"]


def test_a_delegation_result_says_what_seed_003_says() -> None:
    timeout = delegation_result("gpt", None, 1500)
    assert (timeout["status"], timeout["result"]) == ("timeout", "Delegation timeout after 1500ms")
    error = Error(
        id="x", created_at=T0, code=ErrorCode.TARGET_NOT_ALLOWED, message="no", cause_id="r1"
    )
    refused = delegation_result("gpt", error, 1500)
    assert (refused["status"], refused["result"]) == ("failed", "TARGET_NOT_ALLOWED: no")


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"mode": "single", "agents": ["gpt", "claude"]}, "one agent"),
        ({"mode": "orchestrate", "agents": ["claude"]}, "two agents"),
        ({"mode": "orchestrate", "agents": ["gpt", "gpt"]}, "not your local agent"),
        ({"mode": "delegate", "agents": ["gpt", "gpt"]}, "each agent once"),
    ],
)
def test_session_params_fit_their_mode(params: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        CreateSessionParams.model_validate(params)


def test_an_approval_decision_carries_text_only_when_edited() -> None:
    base = {"sessionId": "s1", "approvalId": "a1"}
    assert ApproveParams.model_validate({**base, "decision": "edited", "text": "t"}).text == "t"
    for wrong in ({"decision": "edited"}, {"decision": "approved", "text": "t"}):
        with pytest.raises(ValidationError):
            ApproveParams.model_validate({**base, **wrong})


def _record(envelope_id: str, cause: str, profile: str, requester: str, seq: int) -> AuditRecord:
    return AuditRecord(
        id=f"{envelope_id}-{profile}",
        created_at=T0,
        tenant="demo",
        profile=profile,
        fact="decision",
        trace_id="t1",
        envelope_id=envelope_id,
        causation_id=cause,
        requester=requester,
        target="x",
        chain_index=seq,
    )


def test_a_trace_tree_keeps_the_senders_copy_under_its_cause() -> None:
    records = [
        _record("m1", "", "router", "person-alice", 1),  # the target's copy first
        _record("m1", "", "person-alice", "person-alice", 2),
        _record("c1", "m1", "router", "router", 3),
        _record("c1", "m1", "gpt", "router", 4),
        _record("a1", "c1", "gpt", "gpt", 5),
    ]
    [root] = trace_tree(records)
    assert (root["envelopeId"], root["profile"]) == ("m1", "person-alice")
    [call] = root["children"]
    assert (call["envelopeId"], call["profile"]) == ("c1", "router")
    assert [c["envelopeId"] for c in call["children"]] == ["a1"]


async def test_without_an_audit_reader_the_audit_views_say_so(tmp_path: Path) -> None:
    """The audit reader is optional: a console without one (or with a missing file) serves
    everything else, and its audit methods answer a typed refusal."""
    options = ConsoleOptions(
        audit_reader=tmp_path / "missing.toml", tokens_file=tmp_path / "tokens.json"
    )
    people = People(options, "nats://127.0.0.1:1")
    await people.open_all()
    assert people.audit is None

    async def nothing() -> None:
        return None

    link = PersonLink("alice", load_settings(None))
    session = RpcSession(link, nothing, audit=people.audit)
    answer = await session.handle_one(
        {"jsonrpc": "2.0", "id": 1, "method": "ListAuditRecords", "params": {}}
    )
    assert answer is not None
    assert answer["error"]["data"]["code"] == "INTERNAL_ERROR"
    assert "audit_reader" in answer["error"]["message"]


@pytest.mark.parametrize("decision_first", [True, False])
def test_a_refused_delegation_is_refused_whichever_comes_first(decision_first: bool) -> None:
    """The error answer settles the delegation, the decision refuses the session: two
    streams, no order between them, one outcome."""
    record = SessionRecord("s1", T0, mode="delegate", participants=("gpt",))
    record.delegations = {"r1": {"requestId": "r1", "target": "gpt", "status": "pending"}}
    record.state = "submitted"
    answer = {"requestId": "r1", "target": "gpt", "status": "error"}
    if decision_first:
        record.refuse(_refusal())
        record.settle_delegation("r1", answer)
    else:
        record.settle_delegation("r1", answer)
        record.refuse(_refusal())
    assert record.state == "refused"


def test_a_persons_link_remembers_its_newest_sessions_only() -> None:
    """A link lives as long as its console or A2A edge: one principal opening sessions
    without end does not grow it without bound."""
    link = PersonLink("alice", load_settings(None))
    first = link.reserve("collaborate", ("gpt", "claude"), 4)
    for _ in range(KEPT_SESSIONS):
        newest = link.reserve("collaborate", ("gpt", "claude"), 4)
    assert len(link.sessions) == KEPT_SESSIONS
    assert first.session_id not in link.sessions and newest.session_id in link.sessions


async def test_a_sessions_user_id_is_kept_with_the_session_not_the_connection() -> None:
    """Over HTTP each request gets its own dispatcher, so a `userId` given to CreateSession was
    lost by StartTask (a requirements walk saw `user_id ''` in the audit); over a WebSocket it
    carried over to the connection's later sessions. It is each session's own now."""

    async def nothing() -> None:
        return None

    link = PersonLink("alice", load_settings(None))
    create = {"mode": "single", "agents": ["gpt"], "userId": "u-7"}
    first = await RpcSession(link, nothing).handle_one(
        {"jsonrpc": "2.0", "id": 1, "method": "CreateSession", "params": create}
    )
    assert first is not None
    assert link.sessions[first["result"]["sessionId"]].user_id == "u-7"
    socket = RpcSession(link, nothing)
    for request_id, params in enumerate((create, {"mode": "single", "agents": ["gpt"]})):
        answer = await socket.handle_one(
            {"jsonrpc": "2.0", "id": request_id, "method": "CreateSession", "params": params}
        )
        assert answer is not None
        expected = params.get("userId", "")
        assert link.sessions[answer["result"]["sessionId"]].user_id == expected


def test_the_audit_tenant_is_the_consoles_tenant_unless_set_apart() -> None:
    """One deployment's gate and auditor are one tenant's: `tenant` alone sets both."""
    assert ConsoleOptions(tenant="acme").audit_tenant_in_force == "acme"
    both = ConsoleOptions(tenant="acme", audit_tenant="audits")
    assert both.audit_tenant_in_force == "audits"
    for wildcard in ("*", "a.>", "a b"):  # the audit subjects name it: no wildcard reads more
        with pytest.raises(ValueError, match="tenant"):
            ConsoleOptions(tenant=wildcard)
