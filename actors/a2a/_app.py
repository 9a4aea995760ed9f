"""The A2A edge's HTTP face: an Agent Card and A2A's JSON-RPC methods per exposed agent.

Each agent the signed bundle exposes (`a2a_exposed = true` in its profile) is an A2A agent
at `<base>/agents/<name>/`: its card at `<base>/agents/<name>/.well-known/agent-card.json`,
its methods (A2A 1.0's `SendMessage`, `SendStreamingMessage`, `GetTask`, `CancelTask`, and
0.3's `message/send`, `message/stream`, `tasks/get`, `tasks/cancel` on the same endpoint)
at `<base>/agents/<name>/`, served by the `a2a-sdk`'s own JSON-RPC routes. Exposure is read
from the bundle in force at every request: an agent the signer stops exposing is gone at
once, and an agent never exposed is 404, like a name that does not exist.

Cards are public (they say how to authenticate); every method call needs
`Authorization: Bearer <token>` from `parley a2a token --client NAME`, else it is refused with
401 before the SDK sees it. The SDK keeps each task under its caller's name, so one client
cannot read or cancel another's task (it is not found, exactly like one that never existed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Final

from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, SimpleUser
from starlette.types import ASGIApp, Receive, Scope, Send

from actors.a2a._clients import Clients
from actors.a2a._executor import SessionExecutor
from actors.a2a._options import A2aOptions
from actors.a2a._tasks import BoundedTaskStore

__all__ = ("agent_card", "edge_app")

_AGENT_PATH: Final = re.compile(r"^/agents/([a-z0-9_-]{1,64})(/.*)?$")
_BEARER: Final = "bearer"


def agent_card(agent: str, base_url: str) -> AgentCard:
    """The Agent Card of `agent` served under `base_url` (the edge's public URL)."""
    url = f"{base_url.rstrip('/')}/agents/{agent}/"
    bearer = SecurityScheme(
        http_auth_security_scheme=HTTPAuthSecurityScheme(
            scheme="Bearer", description="a token from `parley a2a token --client NAME`"
        )
    )
    requirement = SecurityRequirement()
    requirement.schemes[_BEARER].SetInParent()
    return AgentCard(
        name=agent,
        description=f"The Parley agent {agent}: each task is a session through the gate.",
        version="1.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes={_BEARER: bearer},
        security_requirements=[requirement],
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="session",
                name=f"ask {agent}",
                description=f"A task for {agent}, decided and audited by the gate.",
                tags=["parley"],
            )
        ],
    )


async def _answer(send: Send, status: int, body: dict[str, object], **headers: str) -> None:
    raw = json.dumps(body).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    head += [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": raw})


def _bearer_token(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == _BEARER else ""
    return ""


class EdgeApp:
    """Routes each request to its agent's SDK app, authenticating every method call."""

    def __init__(
        self, clients: Clients, exposed: Callable[[], frozenset[str]], options: A2aOptions
    ) -> None:
        self.clients = clients
        self.exposed = exposed
        self.options = options
        self.tasks = BoundedTaskStore(
            options.max_tasks_per_client, options.max_task_bytes_per_client
        )
        """Every agent's tasks: one store, so each client's bound covers them all."""
        self.base_url = ""
        """Set once listening (the cards name it)."""
        self._apps: dict[str, ASGIApp] = {}

    def _agent_app(self, agent: str) -> ASGIApp:
        app = self._apps.get(agent)
        if app is None:
            card = agent_card(agent, self.base_url)
            handler = DefaultRequestHandler(
                agent_executor=SessionExecutor(agent, self.clients, self.options.task_timeout_s),
                task_store=self.tasks,
                agent_card=card,
            )
            routes = [
                *create_agent_card_routes(card, card_url=AGENT_CARD_WELL_KNOWN_PATH),
                *create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=True),
            ]
            app = self._apps[agent] = Starlette(routes=routes)
        return app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        found = _AGENT_PATH.match(scope["path"])
        if found is None or found[1] not in self.exposed():
            await _answer(send, 404, {"error": "no such agent here"})
            return
        agent, rest = found[1], found[2] or "/"
        prefix = f"{scope.get('root_path', '')}/agents/{agent}"
        child = dict(scope, root_path=prefix, path=prefix + rest)
        if scope["method"] != "GET":
            client = self.clients.client_of(_bearer_token(scope))
            if client is None:
                error = {"code": -32001, "message": "Unauthorized: a valid bearer token is needed"}
                await _answer(
                    send,
                    401,
                    {"jsonrpc": "2.0", "id": None, "error": error},
                    **{"www-authenticate": 'Bearer realm="parley-a2a"'},
                )
                return
            child["user"] = SimpleUser(client)
            child["auth"] = AuthCredentials(["a2a"])
        await self._agent_app(agent)(child, receive, send)


def edge_app(
    clients: Clients, exposed: Callable[[], frozenset[str]], options: A2aOptions
) -> EdgeApp:
    """The edge's ASGI app; set its `base_url` before serving."""
    return EdgeApp(clients, exposed, options)
