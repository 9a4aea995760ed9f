"""Issue 30, Build item 6: the console bounds what it reads, against a real deployment
(tests/support/console.py: a real nats-server, gate, router, agents and the console process).

- A JSON-RPC body nested 100,000 deep used to get HTTP 500 (Python's parser ran out of
  recursion, and the `RecursionError` was logged as a traceback); over the WebSocket it took the
  connection down. Nesting is now counted before parsing: JSON-RPC's parse error (-32700),
  and the connection goes on.
- A body over the size bound is JSON-RPC's invalid request (-32600), with HTTP 413 (a
  WebSocket frame over it closes the connection, 1009, as before).
- Each sign-in with a person's token used to leave one more live 12-hour token in memory;
  now a person holds at most `max_sign_ins_per_person` (20), the oldest revoked first.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from actors.console._bounds import MAX_BODY_BYTES
from actors.console._tokens import MAX_SIGN_INS_PER_PERSON
from schemas import Namespace
from tests.support.console import ConsoleDeployment, console_deployment

pytestmark = pytest.mark.timeout(180)

DEEP = "[" * 100_000
"""100 KB: far under the size bound, far over any parser's recursion."""
SIGN_INS = 200
"""Ten times the cap: enough to show the cap holds, quick enough for a shared machine."""


@pytest.fixture(scope="module")
async def deployment(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ConsoleDeployment]:
    root = tmp_path_factory.mktemp("console-bounds")
    async with console_deployment(root, Namespace(f"t{uuid.uuid4().hex[:12]}")) as deployed:
        yield deployed


def _call(method: str, request_id: int, params: object = None) -> dict[str, Any]:
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        request["params"] = params
    return request


def _auth(sign_in: str) -> dict[str, str]:
    return {"Content-Type": "application/json", "Authorization": f"Bearer {sign_in}"}


async def _sign_in(client: httpx.AsyncClient, token: str) -> str:
    answer = await client.post("/signin", json={"token": token})
    assert answer.status_code == 200, answer.text
    sign_in: str = answer.json()["signInToken"]
    return sign_in


async def _lists_sessions(client: httpx.AsyncClient, sign_in: str) -> bool:
    answer = await client.post(
        "/rpc", content=json.dumps(_call("ListSessions", 1)), headers=_auth(sign_in)
    )
    if answer.status_code == 401:
        assert answer.json()["error"]["data"]["code"] == "UNAUTHORIZED", answer.text
        return False
    assert answer.status_code == 200, answer.text
    assert isinstance(answer.json()["result"]["sessions"], list)
    return True


async def test_a_deeply_nested_body_is_a_parse_error_over_http(
    deployment: ConsoleDeployment,
) -> None:
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        sign_in = await _sign_in(client, deployment.tokens["alice"])
        answer = await client.post("/rpc", content=DEEP, headers=_auth(sign_in))
        assert answer.status_code == 200, answer.text
        error = answer.json()["error"]
        assert error["code"] == -32700, error
        assert "deeper than 32 levels" in error["message"]
        # Nested within the bound but inside a string, brackets are text: an ordinary call.
        text = _call("ListSessions", 2, {"note": "[" * 1000})
        within = await client.post("/rpc", content=json.dumps(text), headers=_auth(sign_in))
        assert within.json()["error"]["code"] == -32602  # ListSessions takes no params
        # Signing in with such a body is a bad request, not a crash.
        refused = await client.post(
            "/signin", content=DEEP, headers={"Content-Type": "application/json"}
        )
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["data"]["code"] == "INVALID_REQUEST"
        assert await _lists_sessions(client, sign_in)  # the console serves on


async def test_a_deeply_nested_frame_is_a_parse_error_over_the_websocket(
    deployment: ConsoleDeployment,
) -> None:
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        sign_in = await _sign_in(client, deployment.tokens["alice"])
    ws_url = deployment.url.replace("http://", "ws://") + "ws"
    origin = deployment.url.rstrip("/")
    async with ws_connect(ws_url, origin=origin) as socket:  # type: ignore[arg-type]
        await socket.send(json.dumps(_call("SignIn", 0, {"token": sign_in})))
        assert json.loads(await socket.recv())["result"] == {"person": "alice"}
        await socket.send(DEEP)
        error = json.loads(await socket.recv())["error"]
        assert error["code"] == -32700, error
        # The same connection answers the next call.
        await socket.send(json.dumps(_call("ListSessions", 1)))
        answer = json.loads(await socket.recv())
        assert answer["id"] == 1 and isinstance(answer["result"]["sessions"], list), answer
    async with ws_connect(ws_url, origin=origin) as socket:  # type: ignore[arg-type]
        await socket.send(DEEP)  # as the first frame, in place of the sign-in
        assert json.loads(await socket.recv())["error"]["code"] == -32700


async def test_an_oversized_body_is_an_invalid_request(deployment: ConsoleDeployment) -> None:
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        sign_in = await _sign_in(client, deployment.tokens["alice"])
        huge = json.dumps(_call("ListSessions", 1, {"padding": "x" * MAX_BODY_BYTES}))
        answer = await client.post("/rpc", content=huge, headers=_auth(sign_in))
        assert answer.status_code == 413
        error = answer.json()["error"]
        assert error["code"] == -32600, error
        assert error["data"]["code"] == "INVALID_REQUEST"
        assert f"body over {MAX_BODY_BYTES} bytes" in error["message"]
    # A WebSocket frame over the bound is not read: the server closes with 1009 (too big).
    ws_url = deployment.url.replace("http://", "ws://") + "ws"
    async with ws_connect(ws_url, origin=deployment.url.rstrip("/")) as socket:  # type: ignore[arg-type]
        await socket.send(json.dumps(_call("SignIn", 0, {"token": sign_in})))
        assert json.loads(await socket.recv())["result"] == {"person": "alice"}
        await socket.send(huge)
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(socket.recv(), 30)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009, closed.value


async def test_a_sign_in_flood_keeps_only_the_newest_sign_ins(
    deployment: ConsoleDeployment,
) -> None:
    """200 sign-ins with bob's token: the newest 20 work, every older one is refused as not
    signed in (so 20 live tokens are all the console holds for bob); alice's is untouched."""
    async with httpx.AsyncClient(base_url=deployment.url) as client:
        alices = await _sign_in(client, deployment.tokens["alice"])
        bobs = [await _sign_in(client, deployment.tokens["bob"]) for _ in range(SIGN_INS)]
        working = [await _lists_sessions(client, token) for token in bobs]
        assert working.count(True) == MAX_SIGN_INS_PER_PERSON, working
        assert (
            working
            == [False] * (SIGN_INS - MAX_SIGN_INS_PER_PERSON) + [True] * MAX_SIGN_INS_PER_PERSON
        )
        assert await _lists_sessions(client, alices)
