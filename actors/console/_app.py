"""The console's HTTP face (starlette): the page, sign-in, JSON-RPC over POST and WebSocket.

Why it is safe to open in a browser:

- CSRF: `/signin` and `/rpc` accept only `Content-Type: application/json`, and `/rpc` only
  with the sign-in token in the `Authorization` header. A cross-site page can send neither
  without a CORS preflight, which this server never grants. A WebSocket must come from this
  origin (browsers always send `Origin`) and its first frame must sign in with the token.
- Every response carries a strict Content-Security-Policy: scripts, styles and connections
  from this origin only, no inline script or style, no frames, no plugins, no form posts.
  The page builds its DOM with `textContent` only, so an agent's `<script>` is text.
- The page receives the person's own sign-in token and the person's own sessions, nothing
  else: no nkey seed, no NATS credentials, no other person's data.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any, Final

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket, WebSocketDisconnect

from actors.console._bounds import MAX_BODY_BYTES, parse_bounded
from actors.console._people import People
from actors.console._person import Notification, PersonLink
from actors.console._rpc import (
    INVALID_REQUEST,
    PARSE_ERROR,
    RpcError,
    RpcSession,
    body_too_large,
    error_response,
)
from bus import ConfigError

__all__ = ("CONTENT_SECURITY_POLICY", "MAX_BODY_BYTES", "console_app")

log = logging.getLogger("parley.console.http")

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS: Final = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
)
_SIGN_IN_WAIT_S: Final = 10.0
_QUEUE_LIMIT: Final = 1000

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class SecurityHeaders:
    """ASGI middleware: the headers above on every HTTP response."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


def _is_json(request: Request) -> bool:
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media == "application/json"


def _refusal(status: int, code: str, message: str) -> JSONResponse:
    error = RpcError.refused(code, message)
    return JSONResponse(error_response(error), status_code=status)


def _bearer(request: Request) -> str:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


async def _body(request: Request) -> bytes | None:
    """The request's body, or None when it is over MAX_BODY_BYTES (read no further)."""
    received = bytearray()
    async for chunk in request.stream():
        received += chunk
        if len(received) > MAX_BODY_BYTES:
            return None
    return bytes(received)


def console_app(people: People, allowed_hosts: Sequence[str]) -> App:
    """The ASGI application serving `people`, answering only requests naming one of
    `allowed_hosts` (a page from a rebound DNS name is refused before anything else)."""
    static = StaticFiles(packages=[("actors.console", "static")])

    async def index(_: Request) -> Response:
        path, _stat = static.lookup_path("index.html")
        return FileResponse(path, media_type="text/html")

    async def sign_in(request: Request) -> Response:
        if not _is_json(request):
            return _refusal(415, "INVALID_REQUEST", "send application/json")
        try:
            body = parse_bounded(await _body(request) or b"")
            token = body["token"] if isinstance(body, dict) else None
        except (ValueError, KeyError):  # not JSON, too large, nested too deep, no token
            token = None
        if not isinstance(token, str) or not token:
            return _refusal(400, "INVALID_REQUEST", 'send {"token": "..."}')
        signed = people.sign_in(token)
        if signed is None:
            return _refusal(401, "UNAUTHORIZED", "unknown or revoked token")
        person, sign_in_token = signed
        try:
            await people.link(person)
        except ConfigError as exc:
            log.warning("sign-in without credentials", extra={"person": person, "error": str(exc)})
            people.sign_ins.close(sign_in_token)
            return _refusal(503, "UNAUTHORIZED", f"no credentials for {person} in this deployment")
        return JSONResponse({"person": person, "signInToken": sign_in_token})

    async def rpc(request: Request) -> Response:
        if not _is_json(request):
            return _refusal(415, "INVALID_REQUEST", "JSON-RPC takes application/json only")
        token = _bearer(request)
        person = people.sign_ins.person_of(token) if token else None
        if person is None:
            return _refusal(401, "UNAUTHORIZED", "sign in first: Authorization: Bearer <token>")
        link = await people.link(person)

        async def sign_out() -> None:
            people.sign_ins.close(token)

        body = await _body(request)
        if body is None:
            refusal = body_too_large(f"body over {MAX_BODY_BYTES} bytes")
            return JSONResponse(error_response(refusal), status_code=413)
        answer = await _rpc_session(people, link, sign_out).handle_body(body)
        if answer is None:
            return Response(status_code=204)
        return JSONResponse(answer)

    async def socket(websocket: WebSocket) -> None:
        origin, host = websocket.headers.get("origin"), websocket.headers.get("host", "")
        if origin is not None and origin not in (f"http://{host}", f"https://{host}"):
            await websocket.close(code=1008)
            return
        await websocket.accept()
        await _serve_socket(websocket, people)

    app = Starlette(
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))],
        routes=[
            Route("/", index),
            Route("/signin", sign_in, methods=["POST"]),
            Route("/rpc", rpc, methods=["POST"]),
            WebSocketRoute("/ws", socket),
            Mount("/static", static),
        ],
    )
    return SecurityHeaders(app)


async def _frame(websocket: WebSocket) -> str | bytes:
    """The next frame, text or binary (the page sends text; a binary frame is read the same
    way rather than failing the connection)."""
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000), message.get("reason"))
    text = message.get("text")
    return text if text is not None else bytes(message.get("bytes") or b"")


async def _signed_in(websocket: WebSocket, people: People) -> tuple[str, str, Any] | None:
    """The first frame must be `SignIn` with the sign-in token: (person, token, its id)."""
    try:
        frame = parse_bounded(await asyncio.wait_for(_frame(websocket), _SIGN_IN_WAIT_S))
    except (TimeoutError, WebSocketDisconnect):
        return None
    except ValueError as exc:  # not JSON, or nested too deep to parse
        await websocket.send_json(error_response(RpcError(PARSE_ERROR, f"Parse error: {exc}")))
        return None
    if not isinstance(frame, dict) or frame.get("method") != "SignIn":
        await websocket.send_json(error_response(RpcError(INVALID_REQUEST, "sign in first")))
        return None
    params = frame.get("params")
    token = params.get("token") if isinstance(params, dict) else None
    person = people.sign_ins.person_of(token) if isinstance(token, str) else None
    if person is None or not isinstance(token, str):
        refusal = RpcError.refused("UNAUTHORIZED", "unknown or expired sign-in token")
        await websocket.send_json(error_response(refusal, frame.get("id")))
        return None
    return person, token, frame.get("id")


async def _serve_socket(websocket: WebSocket, people: People) -> None:
    """Answer JSON-RPC frames and push the person's `SessionEvent` notifications, in one
    ordered stream: replies and notifications share one queue."""
    signed = await _signed_in(websocket, people)
    if signed is None:
        await websocket.close(code=1008)
        return
    person, token, first_id = signed
    link = await people.link(person)
    outgoing: asyncio.Queue[Notification | list[Any] | None] = asyncio.Queue()

    def push(notification: Notification) -> None:
        if outgoing.qsize() >= _QUEUE_LIMIT:  # a client that does not read: drop it
            outgoing.put_nowait(None)
        else:
            outgoing.put_nowait(notification)

    signed_out = asyncio.Event()

    async def sign_out() -> None:
        people.sign_ins.close(token)
        signed_out.set()

    session = _rpc_session(people, link, sign_out)
    undo = link.listen(push)
    outgoing.put_nowait({"jsonrpc": "2.0", "id": first_id, "result": {"person": person}})

    async def receive() -> None:
        while True:
            answer = await session.handle_body(await _frame(websocket))
            if answer is not None:
                outgoing.put_nowait(answer)
            if signed_out.is_set():  # Shutdown: its answer goes out, then the socket closes
                outgoing.put_nowait(None)
                return

    async def send() -> None:
        while (item := await outgoing.get()) is not None:
            await websocket.send_json(item)

    try:
        receiving = asyncio.create_task(receive())
        sending = asyncio.create_task(send())
        done, pending = await asyncio.wait({receiving, sending}, return_when="FIRST_COMPLETED")
        if receiving in done and receiving.exception() is None:  # Shutdown: send its answer
            await sending
            done, pending = {receiving, sending}, set()
        for task in pending:
            task.cancel()
        for task in done:
            if not task.cancelled() and not isinstance(task.exception(), WebSocketDisconnect):
                task.result()
    finally:
        undo()
    if sending in done:  # signed out or overflowed: close our side
        await websocket.close(code=1000)


def _rpc_session(
    people: People, link: PersonLink, sign_out: Callable[[], Awaitable[None]]
) -> RpcSession:
    """The methods for one signed-in person, with what the console serves everyone."""
    return RpcSession(
        link,
        sign_out,
        audit=people.audit,
        agents=people.agents,
        workspaces=people.workspaces,
        handshake=people.handshake,
    )
