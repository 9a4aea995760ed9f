"""The A2A edge against a real deployment (tests/support/a2a.py), with the `a2a-sdk`'s own
client over real HTTP on loopback.

A client completes a task against gpt and the gate's decision on the message it sent, as its
own principal, is in the audit; tasks/get and tasks/cancel (a cancel stops the session at the
router); message/stream delivers the task's events; 0.3's `message/send` is served too. A bad
token is refused before anything reaches the bus, an agent the bundle does not expose has no
card, and one client cannot read another's task.
"""

from __future__ import annotations

import asyncio
import json
import tomllib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from a2a.client import A2AClientError, Client, ClientConfig, create_client
from a2a.helpers import get_message_text
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError

from actors.a2a import SESSION_KEY
from schemas import AuditRecord, Namespace
from tests.support.a2a import A2aDeployment, a2a_deployment
from tests.support.processes import REPO
from tools.audit import query_records
from tools.demo import sign_bundle

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
async def deployment(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[A2aDeployment]:
    root = tmp_path_factory.mktemp("a2a-edge")
    async with a2a_deployment(root, Namespace(f"t{uuid.uuid4().hex[:12]}")) as deployed:
        yield deployed


async def _client(
    deployment: A2aDeployment, token: str, *, streaming: bool = False, agent: str = "gpt"
) -> tuple[Client, httpx.AsyncClient]:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)
    config = ClientConfig(httpx_client=http, streaming=streaming)
    return await create_client(f"{deployment.url}/agents/{agent}/", config), http


def _request(text: str, *, wait: bool = True) -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, parts=[Part(text=text)], message_id=uuid.uuid4().hex)
    configuration = SendMessageConfiguration(return_immediately=not wait)
    return SendMessageRequest(message=message, configuration=configuration)


async def _responses(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    return [response async for response in client.send_message(request)]


def _last_task(responses: list[StreamResponse]) -> Task:
    tasks = [r.task for r in responses if r.HasField("task")]
    assert tasks, responses
    return tasks[-1]


async def test_a_client_completes_a_task_and_the_gate_audits_it(
    deployment: A2aDeployment,
) -> None:
    client, http = await _client(deployment, deployment.tokens["alice"])
    try:
        task = _last_task(await _responses(client, _request("summarise the quarter")))
    finally:
        await client.close()
        await http.aclose()
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, task
    assert get_message_text(task.status.message) == "gpt summarised: summarise the quarter"
    assert task.artifacts[0].parts[0].text == "gpt summarised: summarise the quarter"
    session_id = task.metadata[SESSION_KEY]
    # The gate decided the message alice's client sent, as her principal, and it is audited.
    locked = deployment.locked
    reader = await locked.connect("audit-cli")
    try:
        js = locked.js(reader, "audit-cli")
        # Live first, then what is stored: a record appended between the two is in one of them.
        live = await reader.subscribe(f"{deployment.ns.root}.audit.*.person-alice")
        await reader.flush()
        records = await query_records(js, deployment.ns, session=session_id)
        decided = [r for r in records if _alices_decision(r, session_id)]
        async with asyncio.timeout(60):
            while not decided:
                message = await live.next_msg(timeout=60)
                record = msgspec.json.decode(message.data, type=AuditRecord)
                decided = [record] if _alices_decision(record, session_id) else []
    finally:
        await reader.close()
    assert decided[0].decision_code == "ALLOW", decided[0]


def _alices_decision(record: AuditRecord, session_id: str) -> bool:
    return (
        record.session_id == session_id
        and record.profile == "person-alice"
        and record.target == "router"
        and bool(record.decision_code)
    )


async def test_get_and_cancel_a_running_task(deployment: A2aDeployment) -> None:
    client, http = await _client(deployment, deployment.tokens["alice"])
    try:
        started = _last_task(await _responses(client, _request("slow report", wait=False)))
        assert started.status.state in (
            TaskState.TASK_STATE_SUBMITTED,
            TaskState.TASK_STATE_WORKING,
        ), started
        fetched = await client.get_task(GetTaskRequest(id=started.id))
        assert fetched.id == started.id
        assert fetched.metadata[SESSION_KEY] == started.metadata[SESSION_KEY]
        canceled = await client.cancel_task(CancelTaskRequest(id=started.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED, canceled
        # The router stopped the session before the task was said canceled.
        assert "the session is canceled" in get_message_text(canceled.status.message)
        again = await client.get_task(GetTaskRequest(id=started.id))
        assert again.status.state == TaskState.TASK_STATE_CANCELED
    finally:
        await client.close()
        await http.aclose()
    # bob's client does not find alice's task: it is not his.
    other, other_http = await _client(deployment, deployment.tokens["bob"])
    try:
        with pytest.raises(TaskNotFoundError):
            await other.get_task(GetTaskRequest(id=started.id))
    finally:
        await other.close()
        await other_http.aclose()


async def test_message_stream_delivers_the_task_events(deployment: A2aDeployment) -> None:
    client, http = await _client(deployment, deployment.tokens["bob"], streaming=True)
    try:
        responses = await _responses(client, _request("summarise the week"))
    finally:
        await client.close()
        await http.aclose()
    states = [r.status_update.status.state for r in responses if r.HasField("status_update")]
    assert TaskState.TASK_STATE_WORKING in states, responses
    assert states[-1] == TaskState.TASK_STATE_COMPLETED, responses
    artifacts = [r.artifact_update for r in responses if r.HasField("artifact_update")]
    assert artifacts[0].artifact.parts[0].text == "gpt summarised: summarise the week"


def _v0_3_call(method: str, request_id: int, text: str) -> dict[str, Any]:
    """A JSON-RPC call by A2A 0.3's method name and message shape."""
    message = {
        "kind": "message",
        "role": "user",
        "messageId": uuid.uuid4().hex,
        "parts": [{"kind": "text", "text": text}],
    }
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {"message": message}}


async def test_the_0_3_method_names_are_served(deployment: A2aDeployment) -> None:
    body = _v0_3_call("message/send", 7, "summarise the year")
    headers = {"Authorization": f"Bearer {deployment.tokens['alice']}"}
    async with httpx.AsyncClient(timeout=120) as http:
        answer = await http.post(f"{deployment.url}/agents/gpt/", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["status"]["state"] == "completed", result
    assert result["artifacts"][0]["parts"][0]["text"] == "gpt summarised: summarise the year"
    # message/stream: the same task as Server-Sent Events, the last one its completion.
    body = _v0_3_call("message/stream", 8, "summarise the decade")
    async with (
        httpx.AsyncClient(timeout=120) as http,
        http.stream("POST", f"{deployment.url}/agents/gpt/", json=body, headers=headers) as sse,
    ):
        assert sse.headers["content-type"].startswith("text/event-stream")
        events = [
            json.loads(line[len("data:") :])
            async for line in sse.aiter_lines()
            if line.startswith("data:")
        ]
    states = [e["result"]["status"]["state"] for e in events if "status" in e["result"]]
    assert states[-1] == "completed", events
    assert "working" in states, events


async def test_a_task_the_gate_refuses_is_rejected(deployment: A2aDeployment) -> None:
    """carol's client is authenticated, but the bundle gives her principal no profile: the
    gate refuses her message, and the task says so with the gate's code."""
    client, http = await _client(deployment, deployment.tokens["carol"])
    try:
        task = _last_task(await _responses(client, _request("summarise the refusal")))
    finally:
        await client.close()
        await http.aclose()
    assert task.status.state == TaskState.TASK_STATE_REJECTED, task
    assert "refused by the gate" in get_message_text(task.status.message)


async def test_a_bad_token_is_refused(deployment: A2aDeployment) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
    async with httpx.AsyncClient(timeout=30) as http:
        for headers in ({}, {"Authorization": "Bearer not-a-token"}, {"Authorization": "x"}):
            answer = await http.post(f"{deployment.url}/agents/gpt/", json=body, headers=headers)
            assert answer.status_code == 401, answer.text
            assert answer.headers["www-authenticate"].startswith("Bearer")
    client, bad_http = await _client(deployment, "not-" + deployment.tokens["alice"])
    try:
        with pytest.raises(A2AClientError):
            await _responses(client, _request("summarise this"))
    finally:
        await client.close()
        await bad_http.aclose()


async def test_only_exposed_agents_have_cards(deployment: A2aDeployment) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        card = await http.get(f"{deployment.url}/agents/gpt/.well-known/agent-card.json")
        assert card.status_code == 200, card.text
        assert card.json()["name"] == "gpt"
        assert card.json()["supportedInterfaces"][0]["url"] == f"{deployment.url}/agents/gpt/"
        assert "bearer" in card.json()["securitySchemes"]
        hidden = await http.get(f"{deployment.url}/agents/claude/.well-known/agent-card.json")
        assert hidden.status_code == 404
        token = {"Authorization": f"Bearer {deployment.tokens['alice']}"}
        call = await http.post(
            f"{deployment.url}/agents/claude/", json={"jsonrpc": "2.0"}, headers=token
        )
        assert call.status_code == 404


async def test_a_bundle_no_trusted_key_signed_exposes_nothing(
    deployment: A2aDeployment, tmp_path: Path
) -> None:
    """The edge verifies the bundle itself: one signed by an unknown key, exposing claude,
    is refused and the bundle in force stays (last in the module: it publishes a bundle)."""
    source = tomllib.loads((REPO / "deploy/policy/demo.toml").read_text())
    source["version"] += 1
    source["profiles"]["claude"]["a2a_exposed"] = True
    signed, _ = sign_bundle(msgspec.json.encode(source), tmp_path / "untrusted")
    admin = await deployment.locked.connect("provisioner")
    try:
        policy = await admin.jetstream().key_value(deployment.ns.bucket("policy"))
        await policy.put("bundle", signed)
    finally:
        await admin.close()
    edge = deployment.system.processes["a2a"]
    await edge.wait_line(r'"msg":"policy bundle refused"', timeout=30)
    async with httpx.AsyncClient(timeout=30) as http:
        hidden = await http.get(f"{deployment.url}/agents/claude/.well-known/agent-card.json")
        assert hidden.status_code == 404
        shown = await http.get(f"{deployment.url}/agents/gpt/.well-known/agent-card.json")
        assert shown.status_code == 200
