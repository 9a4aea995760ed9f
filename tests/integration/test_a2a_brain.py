"""Parley calls an A2A agent: a profile whose brain is `a2a` makes a remote agent, written here
with the `a2a-sdk`'s own server, a Parley agent called through the gate.

The remote agent runs in the test on a loopback port (real HTTP) and wants a bearer token,
which the profile names by environment variable; the Parley side is the locked-down gate,
router and agent host as processes. `parley say @remote ...` is decided by the gate like any
call, reaches the remote as an A2A task, and its answer comes back as the agent's reply.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import uvicorn
from a2a.helpers import new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

from bus import EmbeddedServer
from schemas import Namespace
from tests.support.lockdown import LOCKED_ACTORS, LockedDown
from tests.support.processes import REPO, parley_env
from tests.support.system import finished, parley_cli, running_locked_system
from tools.natsconf import write_nats_config

pytestmark = pytest.mark.timeout(240)

TOKEN_ENV = "PARLEY_TEST_REMOTE_A2A_TOKEN"
REMOTE_TOKEN = "remote-secret-" + uuid.uuid4().hex


class _Remote(AgentExecutor):
    """A remote agent that answers every task with what it was asked, and remembers it."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id and context.message
        text = context.get_user_input()
        self.asked.append(text)
        status = TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)
        await event_queue.enqueue_event(
            Task(id=context.task_id, context_id=context.context_id, status=status)
        )
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.add_artifact([new_text_part(f"remote answers: {text.splitlines()[0]}")])
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


class _WantsToken:
    """Refuses every call without the remote's bearer token (its card stays public)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {REMOTE_TOKEN}".encode():
                self.refused += 1
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
async def remote() -> AsyncIterator[tuple[str, _Remote]]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    card = AgentCard(
        name="remote",
        description="an A2A agent written with the SDK's server",
        version="1",
        supported_interfaces=[
            AgentInterface(url=url + "/", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="answer", name="answer", description="answers", tags=["test"])],
    )
    executor = _Remote()
    handler = DefaultRequestHandler(
        agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card
    )
    app = Starlette(
        routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/")]
    )
    server = uvicorn.Server(uvicorn.Config(_WantsToken(app), log_config=None, lifespan="off"))
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        yield url, executor
    finally:
        server.should_exit = True
        await serving
        listener.close()


@pytest.fixture(scope="module")
def remote_token() -> Iterator[None]:
    """The agent host finds the remote's token in its environment, as a profile names it."""
    os.environ[TOKEN_ENV] = REMOTE_TOKEN
    yield
    del os.environ[TOKEN_ENV]


async def test_parley_calls_an_a2a_agent_through_the_gate(
    remote: tuple[str, _Remote], remote_token: None, tmp_path: Path
) -> None:
    url, executor = remote
    ns = Namespace(f"t{uuid.uuid4().hex[:12]}")
    config_dir = tmp_path / "nats-config"
    write_nats_config(config_dir, [*LOCKED_ACTORS, "remote"], ns)
    profile = tmp_path / "remote.toml"
    profile.write_text(
        'name = "remote"\ndescription = "an A2A agent"\nversion = "1"\nmodel = "a2a"\n'
        f'[brain]\nbackend = "a2a"\nurl = "{url}/"\ntoken_env = "{TOKEN_ENV}"\n'
    )
    policy = tmp_path / "policy.toml"
    demo = (REPO / "deploy/policy/demo.toml").read_text()
    router = 'allowed_targets = ["gpt", "claude", "local", "planner"]'
    assert router in demo, "the demo bundle changed: the router's targets are not where they were"
    demo = demo.replace(router, 'allowed_targets = ["gpt", "claude", "local", "planner", "remote"]')
    policy.write_text(demo + '\n[profiles.remote]\nallowed_targets = ["router"]\n')
    server = EmbeddedServer(tmp_path / "nats", authorization=config_dir / "authorization.conf")
    server.start()
    try:
        locked = LockedDown(server, config_dir, ns)
        agents = {"remote": str(profile)}
        async with running_locked_system(locked, tmp_path / "keys", agents, policy=policy):
            env = parley_env(server.url, ns.root)
            config = str(locked.settings_file("cli"))
            say = parley_cli(env, "say", "--config", config, "@remote", "What is NATS?")
            code, lines = await finished(say, 120)
    finally:
        server.close()
    assert code == 0, lines
    assert any("remote answers: What is NATS?" in line for line in lines), lines
    assert executor.asked and executor.asked[0].startswith("What is NATS?"), executor.asked
