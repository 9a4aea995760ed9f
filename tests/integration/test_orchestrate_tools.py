"""Seed 000's verification 11: tool-enabled runs respect `max_tool_rounds` and timeouts.

Real processes (the gate, the router, and agent hosts: `local` with an OpenAI brain against a
local wire-format server, `helper` it calls as a tool, the shared agent `byte-doc`), driven
as a person drives them (tests/integration/test_orchestrate_e2e.py's `Person`). The model
behind `local` calls a tool whenever one is offered (tests/support/tool_loop_llm.py), so only
the host's `max_tool_rounds` ends its loop; a model that never answers must end the turn with
a timeout failure the session counts, never a hang. And `semi_auto` holds a draft whose turn
used tools for its owner, naming the tools.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from nats.aio.client import Client as NATS

from bus import EmbeddedServer
from schemas import Namespace
from tests.integration.test_orchestrate_e2e import Person, orchestration_policy
from tests.support.agents import write_profile
from tests.support.system import running_system
from tests.support.tool_loop_llm import ToolLoopServer

DRAFT = "Which endpoints skip the auth check?"
MAX_TOOL_ROUNDS = 2
HELPER_SCRIPT = '[[turn]]\nmessage = "helper found: {goal}"\n'
REMOTE_SCRIPT = '[[turn]]\nmessage = "Answer {round} to: {task}"\n'
TOOL_USED = "the local agent used tools to write it (delegate_to_agent)"


def _policy(tmp_path: Path) -> Path:
    """The orchestration bundle, with `local` allowed to delegate to `helper`."""
    path = orchestration_policy(tmp_path)
    text = path.read_text().replace(
        '[profiles.local]\nallowed_targets = ["router"]\n',
        '[profiles.local]\nallowed_targets = ["router", "helper"]\nmax_depth = 4\n',
        1,
    )
    path.write_text(text + '\n[profiles.helper]\nallowed_targets = ["local"]\n')
    return path


@asynccontextmanager
async def _running(
    nc: NATS,
    nats_server: EmbeddedServer,
    namespace: Namespace,
    tmp_path: Path,
    server: ToolLoopServer,
    brain_timeout_s: float = 10,
) -> AsyncIterator[None]:
    profiles = tmp_path / "profiles"
    local = write_profile(
        profiles,
        "local",
        f'backend = "openai"\nbase_url = "{server.url}/v1"\napi_key = "k-test"\n'
        f"timeout_s = {brain_timeout_s}",
        extra=f'model = "model-x"\ndelegates_to = ["helper"]\nmax_tool_rounds = {MAX_TOOL_ROUNDS}',
    )
    helper = write_profile(
        profiles,
        "helper",
        'backend = "scripted"\nscript = "helper-script.toml"',
        script=HELPER_SCRIPT,
    )
    remote = write_profile(
        profiles,
        "byte-doc",
        'backend = "scripted"\nscript = "byte-doc-script.toml"',
        script=REMOTE_SCRIPT,
    )
    agents = {"local": str(local), "helper": str(helper), "byte-doc": str(remote)}
    async with running_system(
        nc,
        nats_server,
        namespace,
        tmp_path / "keys",
        agents,
        policy=_policy(tmp_path),
        router_options={"orchestration": {"turn_timeout_s": 60}},
    ):
        yield


async def test_verification_11_the_tool_loop_stops_at_max_tool_rounds_and_the_turn_ends(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    """Verification 11: a model that would call tools for ever is offered them for
    `max_tool_rounds` rounds, then asked without tools; its draft still comes back, names the
    tool it used, and is sent (full_auto) to the shared agent."""
    server = ToolLoopServer(checks="openai", draft=DRAFT)
    await server.start()
    try:
        async with _running(nc, nats_server, namespace, tmp_path, server):
            person = Person(nc, namespace)
            await person.open(mode="full_auto", max_turns=1)
            drafted = await person.until("step_completed", role="local_agent")
            end = await person.until("session_completed")
    finally:
        await server.close()
    assert server.offered() == [True] * MAX_TOOL_ROUNDS + [False], server.offered()
    assert len(server.tool_calls) == MAX_TOOL_ROUNDS
    assert not server.refused, server.refused
    assert drafted.payload["message"] == DRAFT
    assert drafted.payload["tools_used"] == ["delegate_to_agent"]
    assert [e.payload["message"] for e in person.outbound()] == [DRAFT]
    assert end.stop_reason == "max_turns"


async def test_verification_11_a_brain_slower_than_its_timeout_fails_the_turn(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    """Verification 11: a model that never answers ends each local turn with a timeout
    failure the session shows and counts toward maxFailures; the session ends in `error`
    with a reason, and nothing is sent to the shared agent."""
    server = ToolLoopServer(checks="openai", hang=True)
    await server.start()
    try:
        async with _running(nc, nats_server, namespace, tmp_path, server, brain_timeout_s=1):
            person = Person(nc, namespace)
            await person.open(mode="full_auto", max_failures=2)
            failed = await person.until("session_failed")
    finally:
        await server.close()
    failures = [
        e.payload
        for e in person.seen
        if e.event_type == "step_completed" and e.payload.get("role") == "failure"
    ]
    assert len(failures) == 2, failures
    assert all("gave no answer within 1 s" in f["message"] for f in failures), failures
    assert [f["failures"] for f in failures] == [1, 2]
    assert failed.stop_reason == "max_failures" and failed.payload["reason"]
    assert person.outbound() == []
    assert len(server.requests) == 2


async def test_semi_auto_holds_a_draft_whose_local_turn_used_tools(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace, tmp_path: Path
) -> None:
    """semi_auto's tool-use rule end to end (verification 11's runs under review): a clean,
    short draft written with tools waits for its owner, the reason naming the tool; once
    approved it is sent."""
    server = ToolLoopServer(checks="openai", draft=DRAFT)
    await server.start()
    try:
        async with _running(nc, nats_server, namespace, tmp_path, server):
            person = Person(nc, namespace)
            await person.open(mode="semi_auto", max_turns=1)
            asked = await person.until("approval_requested")
            assert person.outbound() == []
            assert asked.payload["reasons"] == [TOOL_USED]
            assert asked.payload["draft"] == DRAFT
            await person.control("approve", approval_id=asked.payload["approval_id"])
            sent = await person.until("step_started", role="outbound")
            end = await person.until("session_completed")
    finally:
        await server.close()
    assert sent.payload["sent_by"] == "approved" and sent.payload["message"] == DRAFT
    assert end.stop_reason == "max_turns"
