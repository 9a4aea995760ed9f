"""A person's signed-in console WebSocket for task tests: JSON-RPC calls, and every
`SessionEvent` notification kept in order so a test can wait for one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect

from tests.support.task_system import TaskDeployment

__all__ = ("TaskSocket", "signed_in", "start_task")


class TaskSocket:
    """One person's signed-in WebSocket: calls, and every notification kept in order."""

    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket
        self.next_id = 10
        self.notes: list[dict[str, Any]] = []

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        request = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        await self.socket.send(json.dumps(request))
        while True:
            frame = json.loads(await asyncio.wait_for(self.socket.recv(), 30))
            if frame.get("id") == self.next_id:
                return dict(frame)
            self.notes.append(frame)

    async def event(self, session_id: str, event_type: str) -> dict[str, Any]:
        """The first `SessionEvent` of `event_type` in `session_id`, waiting for it."""
        index = 0
        while True:
            while index < len(self.notes):
                params = self.notes[index].get("params", {})
                index += 1
                if params.get("sessionId") == session_id and params.get("eventType") == event_type:
                    return dict(params)
            self.notes.append(json.loads(await asyncio.wait_for(self.socket.recv(), 90)))

    def events(self, session_id: str) -> list[str]:
        return [
            n["params"]["eventType"]
            for n in self.notes
            if n.get("method") == "SessionEvent" and n["params"].get("sessionId") == session_id
        ]


@asynccontextmanager
async def signed_in(deployment: TaskDeployment, person: str) -> AsyncIterator[TaskSocket]:
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        answer = await client.post("/signin", json={"token": deployment.tokens[person]})
        assert answer.status_code == 200, answer.text
        sign_in = answer.json()["signInToken"]
    ws_url = deployment.url.replace("http://", "ws://") + "ws"
    async with ws_connect(ws_url, origin=deployment.url.rstrip("/")) as socket:  # type: ignore[arg-type]
        first = {"jsonrpc": "2.0", "id": 0, "method": "SignIn", "params": {"token": sign_in}}
        await socket.send(json.dumps(first))
        assert json.loads(await socket.recv())["result"] == {"person": person}
        yield TaskSocket(socket)


async def start_task(alice: TaskSocket, goal: str) -> str:
    created = await alice.call("CreateSession", mode="task", agents=["gpt"])
    session_id = str(created["result"]["sessionId"])
    assert created["result"]["taskState"] == "SESSION_CREATED"
    started = await alice.call("StartTask", sessionId=session_id, prompt=goal)
    assert started["result"]["state"] == "submitted", started
    return session_id
