"""The console's JSON-RPC 2.0 API against a real deployment (tests/support/console.py).

Conformance (parse errors, invalid requests, unknown methods, wrong params, batches,
notifications, each with JSON-RPC's code and seed 002's error shape), sign-in and CSRF
(JSON only, token header only), the security headers, owner-only sessions, and a session run
through StartTask to its end with `SessionEvent` notifications on the WebSocket.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from nats.aio.msg import Msg
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidStatus

from actors.console import CONTENT_SECURITY_POLICY
from schemas import Namespace
from tests.support.console import ORCHESTRATE_OBJECTIVE, ConsoleDeployment, console_deployment

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
async def deployment(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ConsoleDeployment]:
    root = tmp_path_factory.mktemp("console-rpc")
    async with console_deployment(root, Namespace(f"t{uuid.uuid4().hex[:12]}")) as deployed:
        yield deployed


async def _sign_in(client: httpx.AsyncClient, token: str) -> str:
    answer = await client.post("/signin", json={"token": token})
    assert answer.status_code == 200, answer.text
    sign_in: str = answer.json()["signInToken"]
    return sign_in


async def _rpc(client: httpx.AsyncClient, sign_in: str, body: object) -> Any:
    answer = await client.post("/rpc", content=json.dumps(body), headers=_json_auth(sign_in))
    assert answer.status_code in (200, 204), answer.text
    return answer.json() if answer.status_code == 200 else None


def _json_auth(sign_in: str) -> dict[str, str]:
    return {"Content-Type": "application/json", "Authorization": f"Bearer {sign_in}"}


def _call(method: str, params: object = None, request_id: object = 1) -> dict[str, Any]:
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        request["params"] = params
    return request


async def test_sign_in_wants_json_and_a_known_token(deployment: ConsoleDeployment) -> None:
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        wrong = await client.post("/signin", json={"token": "not-a-token"})
        assert wrong.status_code == 401
        assert wrong.json()["error"]["data"]["code"] == "UNAUTHORIZED"
        form = await client.post("/signin", data={"token": deployment.tokens["alice"]})
        assert form.status_code == 415  # a cross-site form post is no sign-in
        assert await _sign_in(client, deployment.tokens["alice"])


async def test_rpc_takes_only_json_with_the_token_header(deployment: ConsoleDeployment) -> None:
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        sign_in = await _sign_in(client, deployment.tokens["alice"])
        body = json.dumps(_call("ListSessions"))
        no_token = await client.post(
            "/rpc", content=body, headers={"Content-Type": "application/json"}
        )
        assert no_token.status_code == 401
        plain = await client.post(
            "/rpc",
            content=body,
            headers={"Content-Type": "text/plain", "Authorization": f"Bearer {sign_in}"},
        )
        assert plain.status_code == 415  # what a cross-site form or simple fetch could send
        cookie_only = await client.post(
            "/rpc",
            content=body,
            headers={"Content-Type": "application/json", "Cookie": f"token={sign_in}"},
        )
        assert cookie_only.status_code == 401  # only the header signs a call
        listed = await _rpc(client, sign_in, _call("ListSessions"))
        assert isinstance(listed["result"]["sessions"], list)


async def test_protocol_errors_have_json_rpc_codes(deployment: ConsoleDeployment) -> None:
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        sign_in = await _sign_in(client, deployment.tokens["alice"])
        headers = _json_auth(sign_in)
        parse = await client.post("/rpc", content=b"{not json", headers=headers)
        assert parse.json()["error"]["code"] == -32700
        assert parse.json()["id"] is None
        invalid = await _rpc(client, sign_in, {"id": 3, "method": "ListSessions"})
        assert invalid["error"]["code"] == -32600
        assert (await _rpc(client, sign_in, []))["error"]["code"] == -32600
        assert (await _rpc(client, sign_in, 42))["error"]["code"] == -32600
        unknown = await _rpc(client, sign_in, _call("Teleport", {}, "x"))
        assert unknown == {
            "jsonrpc": "2.0",
            "id": "x",
            "error": {"code": -32601, "message": "Method not found: Teleport"},
        }
        positional = await _rpc(client, sign_in, _call("GetSessionState", ["s1"]))
        assert positional["error"]["code"] == -32602
        empty = await _rpc(client, sign_in, _call("CreateSession", {"agents": []}))
        assert empty["error"]["code"] == -32602
        assert "agents" in empty["error"]["message"]
        typo = await _rpc(
            client, sign_in, _call("CreateSession", {"agents": ["gpt"], "maxRound": 2})
        )
        assert typo["error"]["code"] == -32602
        rounds = await _rpc(
            client, sign_in, _call("CreateSession", {"agents": ["gpt"], "maxRounds": 0})
        )
        assert rounds["error"]["code"] == -32602


async def test_batches_and_notifications(deployment: ConsoleDeployment) -> None:
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        sign_in = await _sign_in(client, deployment.tokens["alice"])
        notification = {"jsonrpc": "2.0", "method": "ListSessions"}
        assert await _rpc(client, sign_in, notification) is None  # 204, no body
        batch = [
            _call("ListSessions", None, 1),
            notification,
            _call("Nope", {}, 2),
            {"jsonrpc": "2.0"},
        ]
        answers = await _rpc(client, sign_in, batch)
        assert [a.get("id") for a in answers] == [1, 2, None]
        assert "result" in answers[0]
        assert answers[1]["error"]["code"] == -32601
        assert answers[2]["error"]["code"] == -32600
        assert await _rpc(client, sign_in, [notification, notification]) is None


async def test_seed_002_error_shape_and_owner_only_sessions(deployment: ConsoleDeployment) -> None:
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        alice = await _sign_in(client, deployment.tokens["alice"])
        bob = await _sign_in(client, deployment.tokens["bob"])
        created = (
            await _rpc(client, alice, _call("CreateSession", {"mode": "single", "agents": ["gpt"]}))
        )["result"]
        session_id = created["sessionId"]
        assert created["state"] == "created"
        # Seed 002 §6: the console checked the bundle in force with its own least grants.
        handshake = created["handshake"]
        assert handshake["policyBundle"]["tenantId"] == "demo"
        assert handshake["policyBundle"]["label"] == "demo-1"
        assert handshake["compatibility"]["status"] == "compatible"
        assert handshake["featureFlags"]["auditViews"] is True
        assert handshake["limits"]["agents"]["gpt"]["traceMessageBudget"] > 0
        # Another person's profile, or the router's, is nobody's business here: told as of a
        # name nobody has (an attack review read bob's budgets and the router's rate).
        for names in (["person-bob", "person-nobody"], ["router", "gate"]):
            params: dict[str, object] = {"mode": "collaborate", "agents": names}
            told = (await _rpc(client, alice, _call("CreateSession", params)))["result"]
            assert told["handshake"]["limits"]["agents"] == dict.fromkeys(names)
            assert told["handshake"]["capabilities"] == {name: [] for name in names}
        theirs = await _rpc(client, bob, _call("GetSessionState", {"sessionId": session_id}))
        assert theirs["error"]["code"] == -32000
        assert theirs["error"]["data"] == {
            "code": "SESSION_NOT_FOUND",
            "message": f"no session {session_id} of yours",
            "retryable": False,
            "details": {"sessionId": session_id},
        }
        for method in ("StartTask", "CancelTask", "ResumeSession"):
            params = (
                {"sessionId": session_id, "prompt": "hijack"}
                if method == "StartTask"
                else {"sessionId": session_id}
            )
            refused = await _rpc(client, bob, _call(method, params))
            assert refused["error"]["data"]["code"] == "SESSION_NOT_FOUND", method
        listed = (await _rpc(client, bob, _call("ListSessions")))["result"]["sessions"]
        assert session_id not in [s["sessionId"] for s in listed]
        not_started = await _rpc(client, alice, _call("CancelTask", {"sessionId": session_id}))
        assert not_started["error"]["data"]["code"] == "INVALID_REQUEST"
        # Task options are honored or refused, never ignored (a requirements walk found all
        # three accepted and without effect): nothing is submitted for a refused one.
        for options, said in [
            ({"allowNetwork": False}, "allowNetwork false is not supported"),
            ({"approvalMode": "always"}, "approvalMode 'always' is not supported"),
            ({"maxSteps": 40}, "maxSteps caps a collaboration's rounds"),
        ]:
            params = {"sessionId": session_id, "prompt": "p", "taskOptions": options}
            refused = await _rpc(client, alice, _call("StartTask", params))
            assert said in refused["error"]["message"], refused
        state = await _rpc(client, alice, _call("GetSessionState", {"sessionId": session_id}))
        assert state["result"]["state"] == "created", state


async def test_a_single_call_runs_to_its_answer_with_live_notifications(
    deployment: ConsoleDeployment,
) -> None:
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        sign_in = await _sign_in(client, deployment.tokens["alice"])
    ws_url = deployment.url.replace("http://", "ws://") + "ws"
    origin = deployment.url.rstrip("/")
    async with ws_connect(ws_url, origin=origin) as socket:  # type: ignore[arg-type]
        await socket.send(json.dumps(_call("SignIn", {"token": sign_in}, 0)))
        assert json.loads(await socket.recv())["result"] == {"person": "alice"}
        await socket.send(
            json.dumps(_call("CreateSession", {"mode": "single", "agents": ["gpt"]}, 1))
        )
        session_id = json.loads(await socket.recv())["result"]["sessionId"]
        prompt = "Summarize this in 1 sentence, then stop."
        await socket.send(
            json.dumps(_call("StartTask", {"sessionId": session_id, "prompt": prompt}, 2))
        )
        # The session's first events may come before the reply: the console tells them as they
        # are folded in, which can be while the submission's store is still being answered.
        early = []
        while "id" not in (started := json.loads(await socket.recv())):
            early.append(started)
        assert started["id"] == 2 and started["result"]["state"] == "submitted", started
        task_id = started["result"]["taskId"]
        kinds = []
        while True:
            frame = early.pop(0) if early else json.loads(await socket.recv())
            assert frame["method"] == "SessionEvent"
            assert frame["params"]["sessionId"] == session_id
            assert frame["params"]["taskId"] == task_id, frame  # seed 002 §13.1
            kinds.append(frame["params"]["eventType"])
            if frame["params"]["eventType"] == "session_completed":
                assert frame["params"]["payload"]["stopReason"] == "final"
                break
        assert kinds[0] == "session_created"
        assert "step_completed" in kinds
        await socket.send(json.dumps(_call("GetSessionState", {"sessionId": session_id}, 3)))
        state = json.loads(await socket.recv())["result"]
        assert state["state"] == "completed"
        assert [e["eventType"] for e in state["events"]] == kinds
        after = state["events"][0]["eventId"]
        await socket.send(
            json.dumps(_call("ResumeSession", {"sessionId": session_id, "afterEventId": after}, 4))
        )
        resumed = json.loads(await socket.recv())["result"]
        assert [e["eventType"] for e in resumed["events"]] == kinds[1:]
        await socket.send(json.dumps(_call("Shutdown", {}, 5)))
        assert json.loads(await socket.recv())["result"] == {"signedOut": True}
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        after_shutdown = await client.post(
            "/rpc", content=json.dumps(_call("ListSessions")), headers=_json_auth(sign_in)
        )
        assert after_shutdown.status_code == 401


async def test_a_foreign_origin_gets_no_websocket(deployment: ConsoleDeployment) -> None:
    ws_url = deployment.url.replace("http://", "ws://") + "ws"
    with pytest.raises(InvalidStatus, match=r"403"):
        async with ws_connect(ws_url, origin="http://evil.example") as socket:  # type: ignore[arg-type]
            await socket.recv()


async def test_every_response_carries_the_security_headers(deployment: ConsoleDeployment) -> None:
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        for path in ("/", "/static/app.js", "/static/style.css"):
            answer = await client.get(path)
            assert answer.status_code == 200, path
            assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert "SU" not in answer.text.split() and "nkey" not in answer.text
        assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY


async def test_an_oversized_body_and_a_foreign_host_are_refused(
    deployment: ConsoleDeployment,
) -> None:
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        sign_in = await _sign_in(client, deployment.tokens["alice"])
        huge = json.dumps(_call("ListSessions", {"padding": "x" * (1 << 20)}))
        answer = await client.post("/rpc", content=huge, headers=_json_auth(sign_in))
        assert answer.status_code == 413
        assert answer.json()["error"]["data"]["code"] == "INVALID_REQUEST"
        rebound = await client.get("/", headers={"Host": "attacker.example"})
        assert rebound.status_code == 400  # a DNS name rebound to this machine
        local = await client.get("/", headers={"Host": "localhost"})
        assert local.status_code == 200


class _Socket:
    """One signed-in WebSocket: calls answered by id, notifications kept in order."""

    def __init__(self, socket: Any) -> None:
        self.socket = socket
        self.notes: list[dict[str, Any]] = []
        self.next_id = 100

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        await self.socket.send(json.dumps(_call(method, params, self.next_id)))
        while True:
            frame = json.loads(await asyncio.wait_for(self.socket.recv(), 30))
            if frame.get("id") == self.next_id:
                return dict(frame)
            self.notes.append(frame)

    async def event(
        self, event_type: str, seen: int = 0, *, nth: int = 1, **payload: Any
    ) -> dict[str, Any]:
        """The `nth` `SessionEvent` of `event_type` (whose payload has `payload`'s values)
        after the first `seen` notifications. Counting them, rather than starting after what
        was read so far, is what makes it exact: notifications that arrive while a call waits
        for its answer are kept too, so the one looked for may be among them."""
        index = seen
        found = 0
        while True:
            while index < len(self.notes):
                note = self.notes[index]
                index += 1
                if note.get("method") != "SessionEvent":
                    continue
                params = note["params"]
                if params["eventType"] == event_type and all(
                    params["payload"].get(key) == value for key, value in payload.items()
                ):
                    found += 1
                    if found == nth:
                        return dict(params)
            self.notes.append(json.loads(await asyncio.wait_for(self.socket.recv(), 60)))

    async def notification(self, method: str, seen: int = 0) -> dict[str, Any]:
        """The first notification `method` after the first `seen` notifications."""
        index = seen
        while True:
            while index < len(self.notes):
                note = self.notes[index]
                index += 1
                if note.get("method") == method:
                    return dict(note["params"])
            self.notes.append(json.loads(await asyncio.wait_for(self.socket.recv(), 60)))


@asynccontextmanager
async def _signed_in_socket(deployment: ConsoleDeployment, person: str) -> AsyncIterator[_Socket]:
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        sign_in = await _sign_in(client, deployment.tokens[person])
    ws_url = deployment.url.replace("http://", "ws://") + "ws"
    async with ws_connect(ws_url, origin=deployment.url.rstrip("/")) as socket:  # type: ignore[arg-type]
        await socket.send(json.dumps(_call("SignIn", {"token": sign_in}, 0)))
        assert json.loads(await socket.recv())["result"] == {"person": person}
        yield _Socket(socket)


def _orchestrate(mode: str = "manual", **limits: Any) -> dict[str, Any]:
    return {"mode": "orchestrate", "agents": ["claude", "gpt"], "orchestrationMode": mode, **limits}


async def test_orchestrated_params_are_checked(deployment: ConsoleDeployment) -> None:
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        alice = await _sign_in(client, deployment.tokens["alice"])
        wrong = {
            "one agent": {"mode": "orchestrate", "agents": ["claude"]},
            "itself": {"mode": "orchestrate", "agents": ["gpt", "gpt"]},
            "mode": _orchestrate("reckless"),
            "turns": _orchestrate(maxTurns=0),
            "duration": _orchestrate(maxDurationMs=10),
        }
        for name, params in wrong.items():
            answer = await _rpc(client, alice, _call("CreateSession", params))
            assert answer["error"]["code"] == -32602, name
        created = (await _rpc(client, alice, _call("CreateSession", _orchestrate())))["result"]
        session_id = created["sessionId"]
        assert created["mode"] == "orchestrate"
        assert created["orchestration"]["sharedAgent"] == "gpt"
        approve = {"sessionId": session_id, "approvalId": "a1"}
        bad = [
            ("ApproveAction", approve),  # no decision
            ("ApproveAction", {**approve, "decision": "maybe"}),
            ("ApproveAction", {**approve, "decision": "edited"}),  # an edit without its text
            ("ApproveAction", {**approve, "decision": "approved", "text": "sneaky"}),
            ("TakeOverTask", {"sessionId": session_id}),  # no text
            ("PauseTask", {}),
            ("ResumeTask", {"sessionId": session_id, "extra": 1}),
        ]
        for method, params in bad:
            answer = await _rpc(client, alice, _call(method, params))
            assert answer["error"]["code"] == -32602, (method, params)
        for method in ("PauseTask", "ResumeTask", "TakeOverTask", "ApproveAction"):
            params = {"sessionId": session_id, "text": "now"} if method == "TakeOverTask" else {}
            if method == "ApproveAction":
                params = {**approve, "decision": "approved"}
            params = params or {"sessionId": session_id}
            not_started = await _rpc(client, alice, _call(method, params))
            assert not_started["error"]["data"]["code"] == "INVALID_REQUEST", method


async def test_an_orchestrated_session_approved_edited_rejected_taken_over_paused_and_stopped(
    deployment: ConsoleDeployment,
) -> None:
    async with (
        _signed_in_socket(deployment, "alice") as alice,
        _signed_in_socket(deployment, "bob") as bob,
    ):
        created = await alice.call("CreateSession", _orchestrate("manual", maxTurns=5))
        session_id = created["result"]["sessionId"]
        started = await alice.call(
            "StartTask", {"sessionId": session_id, "prompt": ORCHESTRATE_OBJECTIVE}
        )
        assert started["result"]["state"] == "submitted"
        opened = await alice.event("session_created")
        assert opened["payload"]["orchestration_mode"] == "manual"

        asked = await alice.event("approval_requested")
        first = asked["payload"]["approval_id"]
        assert asked["payload"]["draft"] == "Draft 1: could we meet on Tuesday at ten?"
        state = (await alice.call("GetSessionState", {"sessionId": session_id}))["result"]
        assert [a["approvalId"] for a in state["pendingApprovals"]] == [first]
        # Another person can neither see nor steer it: SESSION_NOT_FOUND, like no session.
        for method, params in (
            ("ApproveAction", {"approvalId": first, "decision": "approved"}),
            ("PauseTask", {}),
            ("ResumeTask", {}),
            ("TakeOverTask", {"text": "hijack"}),
            ("CancelTask", {}),
        ):
            theirs = await bob.call(method, {"sessionId": session_id, **params})
            assert theirs["error"]["data"]["code"] == "SESSION_NOT_FOUND", method
        approve_first = {"sessionId": session_id, "approvalId": first, "decision": "approved"}
        approved = await alice.call("ApproveAction", approve_first)
        assert approved["result"]["decision"] == "approved"
        # At once, before the router tells it resolved (a double click): refused, not sent.
        twice = await alice.call("ApproveAction", {**approve_first, "decision": "rejected"})
        assert twice["error"]["data"]["code"] == "INVALID_REQUEST", twice
        assert f"approval {first} was decided already" in twice["error"]["message"], twice
        resolved = await alice.event("approval_resolved", approval_id=first)
        assert resolved["payload"]["decision"] == "approved"
        await alice.event("step_started", role="outbound", sent_by="approved")
        again = await alice.call("ApproveAction", approve_first)
        assert again["error"]["data"]["code"] == "INVALID_REQUEST"
        assert again["error"]["message"] == (
            f"approval {first} was decided already (approved by person-alice)"
        )

        second = (await alice.event("approval_requested", nth=2))["payload"]["approval_id"]
        edit = "Tuesday at ten suits us; shall we confirm?"
        await alice.call(
            "ApproveAction",
            {"sessionId": session_id, "approvalId": second, "decision": "edited", "text": edit},
        )
        resolved = await alice.event("approval_resolved", approval_id=second)
        assert (resolved["payload"]["decision"], resolved["payload"]["text"]) == ("edited", edit)

        third = (await alice.event("approval_requested", nth=3))["payload"]["approval_id"]
        await alice.call(
            "ApproveAction",
            {
                "sessionId": session_id,
                "approvalId": third,
                "decision": "rejected",
                "reason": "too pushy",
            },
        )
        resolved = await alice.event("approval_resolved", approval_id=third)
        assert resolved["payload"]["decision"] == "rejected"
        redraft = await alice.event("approval_requested", nth=4)  # the local agent drafts again
        fourth = redraft["payload"]["approval_id"]
        assert fourth != third

        seen = len(alice.notes)
        not_paused = await alice.call("ResumeTask", {"sessionId": session_id})
        assert not_paused["result"]["state"] == "resume_requested"  # the router decides...
        refused = await alice.notification("SessionError", seen)  # ...and says no
        assert refused["sessionId"] == session_id
        assert refused["causeId"] == not_paused["result"]["envelopeId"]
        assert "cannot resume" in refused["message"]
        mine = "Let me answer myself: Tuesday at ten works."
        await alice.call("TakeOverTask", {"sessionId": session_id, "text": mine})
        taken = await alice.event("approval_resolved", approval_id=fourth)
        assert taken["payload"]["decision"] == "taken_over"  # the draft awaiting is set aside
        typed = await alice.event("step_started", role="outbound", sent_by="you")
        assert typed["payload"]["message"] == mine

        paused = await alice.call("PauseTask", {"sessionId": session_id})
        assert paused["result"]["state"] == "pause_requested"
        assert (await alice.event("session_paused"))["payload"]["state"] == "paused"
        await alice.call("ResumeTask", {"sessionId": session_id})
        await alice.event("session_resumed")
        await alice.call("CancelTask", {"sessionId": session_id, "reason": "enough"})
        ended = await alice.event("session_canceled")
        assert ended["payload"]["stopReason"] == "stopped"
        state = (await alice.call("GetSessionState", {"sessionId": session_id}))["result"]
        assert state["state"] == "canceled" and state["pendingApprovals"] == []


async def test_a_delegation_fans_out_and_each_answer_is_told(deployment: ConsoleDeployment) -> None:
    """Seed 003 from the console: one `delegation_request` per agent, as `parley delegate`
    sends them; each answer comes back on alice's own durable and is told as it comes. bob's
    profile may not delegate: the gate refuses, and his session says so."""
    async with (
        _signed_in_socket(deployment, "alice") as alice,
        _signed_in_socket(deployment, "bob") as bob,
    ):
        wrong = await alice.call("CreateSession", {"mode": "delegate", "agents": ["gpt", "gpt"]})
        assert wrong["error"]["code"] == -32602
        created = await alice.call(
            "CreateSession", {"mode": "delegate", "agents": ["gpt", "claude"], "deadlineMs": 20000}
        )
        session_id = created["result"]["sessionId"]
        assert created["result"]["mode"] == "delegate"
        theirs = await bob.call("StartTask", {"sessionId": session_id, "prompt": "hijack"})
        assert theirs["error"]["data"]["code"] == "SESSION_NOT_FOUND"
        objective = "list the parser's open questions"
        started = await alice.call("StartTask", {"sessionId": session_id, "prompt": objective})
        assert started["result"]["state"] == "submitted"
        assert len(started["result"]["envelopeIds"]) == 2
        results: dict[str, dict[str, Any]] = {}
        index = 0
        while len(results) < 2:
            while index >= len(alice.notes):
                alice.notes.append(json.loads(await asyncio.wait_for(alice.socket.recv(), 60)))
            note = alice.notes[index]
            index += 1
            if note.get("method") == "DelegationResult":
                results[note["params"]["target"]] = note["params"]
        for target in ("gpt", "claude"):
            assert results[target]["status"] == "success", results[target]["result"]
            assert results[target]["result"] == (
                f"{target} completed the delegated objective: {objective}"
            )
        state = (await alice.call("GetSessionState", {"sessionId": session_id}))["result"]
        assert state["state"] == "completed"
        assert {d["target"] for d in state["delegations"]} == {"gpt", "claude"}

        refused = await bob.call("CreateSession", {"mode": "delegate", "agents": ["gpt"]})
        bobs = refused["result"]["sessionId"]
        seen = len(bob.notes)
        await bob.call("StartTask", {"sessionId": bobs, "prompt": objective})
        # The gate's refusal may come before the answer to StartTask: bob.notes keeps it.
        refusal = await bob.notification("SessionRefused", seen)
        assert refusal["sessionId"] == bobs
        assert refusal["state"] == "refused"
        assert refusal["error"]["code"] == "TARGET_NOT_ALLOWED"


async def test_a_person_sees_the_trace_of_their_session_and_only_their_own_records(
    deployment: ConsoleDeployment,
) -> None:
    """GetTrace draws the traces alice started in her session (her message to the router,
    the router's call to gpt under it); ListAuditRecords gives her own profile's records.
    bob gets SESSION_NOT_FOUND for her session's trace, and none of her records."""
    reader = await deployment.locked.connect("audit-cli")
    router_call_audited = asyncio.Event()
    trace: list[str] = []

    async def on_record(msg: Msg) -> None:
        """gpt's answer to the router's call: recorded after the call (one chain, each record
        appended only after the one before it is stored), so the call is in the stream."""
        record = json.loads(msg.data)
        if trace and record.get("trace_id") == trace[0] and record.get("requester") == "gpt":
            router_call_audited.set()

    await reader.subscribe(f"{deployment.ns.root}.audit.demo.*", cb=on_record)
    await reader.flush()
    try:
        async with (
            _signed_in_socket(deployment, "alice") as alice,
            _signed_in_socket(deployment, "bob") as bob,
        ):
            created = await alice.call("CreateSession", {"mode": "single", "agents": ["gpt"]})
            session_id = created["result"]["sessionId"]
            prompt = "Trace this in 1 sentence, then stop."
            started = await alice.call("StartTask", {"sessionId": session_id, "prompt": prompt})
            trace.append(started["result"]["envelopeId"])
            await alice.event("session_completed")
            await asyncio.wait_for(router_call_audited.wait(), 30)

            # A record is seen as it is published; the stream may store the call's a moment
            # later (the auditor's appends are pipelined): the trace is read until it has it.
            async with asyncio.timeout(10):
                below: list[tuple[str, str]] = []
                while ("router", "gpt") not in below:
                    traced = (await alice.call("GetTrace", {"sessionId": session_id}))["result"]
                    assert traced["traceIds"] == trace
                    [root] = traced["tree"]
                    assert (root["requester"], root["target"], root["status"]) == (
                        "person-alice",
                        "router",
                        "delivered",
                    ), root
                    below = [(c["requester"], c["target"]) for c in root["children"]]
            theirs = await bob.call("GetTrace", {"sessionId": session_id})
            assert theirs["error"]["data"]["code"] == "SESSION_NOT_FOUND"

            mine = (await alice.call("ListAuditRecords", {}))["result"]
            assert mine["profile"] == "person-alice"
            assert mine["records"], mine
            assert {r["profile"] for r in mine["records"]} == {"person-alice"}
            assert trace[0] in {r["envelopeId"] for r in mine["records"]}
            bobs = (await bob.call("ListAuditRecords", {}))["result"]["records"]
            assert {r["profile"] for r in bobs} <= {"person-bob"}
            assert trace[0] not in {r["envelopeId"] for r in bobs}
            wrong = await alice.call("ListAuditRecords", {"profile": "person-bob"})
            assert wrong["error"]["code"] == -32602  # no params: the sign-in says whose
    finally:
        await reader.close()
