"""Issue 21, Build items 1 and 2: answers charged with their call; every refusal reaches whoever
waits.

Every test runs the least-privilege config of `parley nats-config` on a real nats-server, with
the real gate and router processes. Where an agent must misbehave, a raw nats-py client holding
that agent's own credentials plays it: it reads its own deliveries and submits on
`parley.submit.<agent>`, the only things the broker lets it do.

- An answer the gate refuses (a forged identity, too large once delivered, or not even
  decodable) used to reach only its sender: the router waited for an answer that had been
  given until its turn timeout. Now the router gets a typed error about its call at once
  and ends the session with reason `error` and a message a person reads ("claude's answer
  was refused: ...").
- Under a policy whose agents may send 4 messages a minute, four concurrent collaborations
  (8 answers per agent) used to have answers refused `RATE_LIMITED` for the pair's rate that
  their calls had already paid; now each ends with its own stop reason.
- A second answer to the same call is refused as `DUPLICATE_ENVELOPE` and its decision is
  recorded: one answer per call, so answers free of the rate cannot become a flood.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from bus import parse_trace_headers, wire_size
from schemas import (
    ActorHeartbeat,
    AgentCall,
    AgentResponse,
    AnyEnvelope,
    Decision,
    Error,
    ErrorCode,
    Namespace,
    Reply,
    decode_envelope,
    encode,
    heartbeat_key,
    hop_delta_for,
    new_id,
    utc_now,
)
from tests.support.lockdown import LockedDown
from tests.support.processes import REPO, parley_env
from tests.support.router_wire import Timeline
from tests.support.system import finished, parley_cli, running_locked_system
from tools.demo import DEMO_GOAL

ROUTER_OPTIONS = {"start_grace_s": 600.0, "turn_timeout_s": 600.0}
"""The played agents' silence is never judged: only the gate's word can end their sessions."""
ENDS_WITHIN_S = 5.0
"""A refused answer ends its session at once: about a second, with room for a busy machine."""


@dataclass
class Agent:
    """A raw client holding one agent's credentials, reading its own deliveries."""

    name: str
    nc: NATS
    js: JetStreamContext
    ns: Namespace
    sub: JetStreamContext.PullSubscription

    async def delivered(self, timeout: float = 20.0) -> tuple[Msg, AnyEnvelope]:
        (msg,) = await self.sub.fetch(1, timeout=timeout)
        await msg.ack_sync()
        return msg, decode_envelope(msg.data)

    async def call(self) -> tuple[Msg, AgentCall]:
        msg, envelope = await self.delivered()
        assert isinstance(envelope, AgentCall), envelope
        return msg, envelope

    async def submit(self, envelope: AnyEnvelope, delivered: Msg, call: AgentCall) -> None:
        """Submit `envelope` caused by `call` with honest headers, as an agent host does."""
        await self.js.publish(
            self.ns.submit(self.name), encode(envelope), headers=_headers(delivered, call, envelope)
        )

    async def refusal_of(self, envelope_id: str) -> Error:
        while True:
            _, delivered = await self.delivered()
            if isinstance(delivered, Error) and delivered.cause_id == envelope_id:
                return delivered


def _headers(delivered: Msg, call: AgentCall, envelope: AnyEnvelope) -> dict[str, str]:
    trace = parse_trace_headers(delivered.headers, call.id)
    return trace.child(call.id, hop_delta_for(envelope)).to_headers(envelope.id)


def _answer(call: AgentCall, text: str, *, sender: str = "") -> AgentResponse:
    return AgentResponse(
        id=new_id(),
        created_at=utc_now(),
        sender=sender or call.target,
        text=text,
        call_id=call.call_id,
        session_id=call.session_id,
        round=call.round,
        max_rounds=call.max_rounds,
        reply=Reply(message=text, final=True),
    )


@asynccontextmanager
async def played(locked: LockedDown, name: str) -> AsyncIterator[Agent]:
    """Play agent `name` with its own credentials (and a heartbeat, so the router calls it)."""
    nc = await locked.connect(name)
    try:
        js = locked.js(nc, name)
        beat = ActorHeartbeat(
            actor_id=name,
            kind="agent",
            pid=1,
            started_at=utc_now(),
            beat_at=utc_now(),
            period_s=600.0,
        )
        await (await js.key_value(locked.ns.bucket("registry"))).put(
            heartbeat_key(name), encode(beat)
        )
        sub = await js.pull_subscribe_bind(durable=name, stream=locked.ns.stream("deliver"))
        yield Agent(name, nc, js, locked.ns, sub)
    finally:
        await nc.close()


@asynccontextmanager
async def decisions_of(locked: LockedDown, sender: str) -> AsyncIterator[asyncio.Queue[Decision]]:
    """The gate's decisions on `sender`'s submissions, read as an operator reads them."""
    admin = await locked.connect("provisioner")
    queue: asyncio.Queue[Decision] = asyncio.Queue()

    async def on_decision(msg: Msg) -> None:
        decision = decode_envelope(msg.data)
        assert isinstance(decision, Decision)
        queue.put_nowait(decision)

    try:
        await admin.jetstream().subscribe(
            locked.ns.decisions(sender),
            cb=on_decision,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )
        yield queue
    finally:
        await admin.close()


async def decision_on(queue: asyncio.Queue[Decision], envelope_id: str) -> Decision:
    while True:
        decision = await asyncio.wait_for(queue.get(), 20)
        if decision.envelope_id == envelope_id:
            return decision


Refused = Callable[[Agent, Msg, AgentCall], AgentResponse]


def _forged(agent: Agent, delivered: Msg, call: AgentCall) -> AgentResponse:
    """An answer whose `sender` names another agent: refused by a policy rule (plan())."""
    return _answer(call, "I am gpt, honest", sender="gpt")


def _too_large(agent: Agent, delivered: Msg, call: AgentCall) -> AgentResponse:
    """An answer at the server's limit as submitted, over it once the gate adds its headers."""
    big = _answer(call, "a")
    room = agent.nc.max_payload - wire_size(encode(big), _headers(delivered, call, big)) - 16
    return msgspec.structs.replace(big, text="a" * room)


def _undecodable(agent: Agent, delivered: Msg, call: AgentCall) -> AgentResponse:
    """An answer that does not validate (an empty reply message): refused before deciding."""
    return _answer(call, "")


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (_forged, ErrorCode.FORGED_HEADER),
        (_too_large, ErrorCode.INVALID_REQUEST),
        (_undecodable, ErrorCode.INVALID_REQUEST),
    ],
    ids=["forged-identity", "too-large-once-delivered", "undecodable"],
)
async def test_a_refused_answer_ends_its_session_at_once_with_the_true_reason(
    locked_down: LockedDown, tmp_path: Path, make: Refused, code: ErrorCode
) -> None:
    """`parley say @claude` waits on claude's answer; the gate refuses it. The session ends
    with reason `error` well within a second or so (the router's turn timeout is ten minutes),
    and `parley say` prints the refusal."""
    locked = locked_down
    async with (
        running_locked_system(locked, tmp_path / "keys", {}, router_options=ROUTER_OPTIONS),
        played(locked, "claude") as claude,
    ):
        say = parley_cli(
            locked_env(locked), "say", "--config", str(locked.settings_file("cli")), "@claude", "hi"
        )
        delivered, call = await claude.call()
        assert call.session_id is not None
        admin = await locked.connect("provisioner")
        try:
            line = Timeline(admin.jetstream(), locked.ns, call.session_id)
            await line.open()
            refused = make(claude, delivered, call)
            sent = time.monotonic()
            await claude.submit(refused, delivered, call)
            end = await line.until_end(timeout=ENDS_WITHIN_S)
            took = time.monotonic() - sent
        finally:
            await admin.close()
        assert (end.event_type, end.stop_reason) == ("session_failed", "error"), end
        assert end.payload["code"] == code, end.payload
        message = str(end.payload["message"])
        assert message.startswith(f"claude's answer was refused: {code}: "), message
        assert took < ENDS_WITHIN_S
        # The sender is told too, as before.
        assert (await claude.refusal_of(refused.id)).code == code
        exit_code, lines = await finished(say, 30)
        assert exit_code == 1, lines
        assert any(
            re.search(rf"error: {code}: claude's answer was refused: {code}: ", line)
            for line in lines
        ), lines


def locked_env(locked: LockedDown) -> dict[str, str]:
    """The environment a `parley` command needs beside its `--config` file."""
    return parley_env(locked.server.url, locked.ns.root)


async def test_four_collaborations_under_a_tight_rate_all_end_with_their_own_reasons(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    """The demo's policy with each agent allowed 4 messages a minute to the router, and four
    `parley collab` sessions at once (each agent answers twice per session): every answer
    answers a call the router's own rate paid for, so every session completes."""
    locked = locked_down
    source = (REPO / "deploy/policy/demo.toml").read_text()
    tight, agents = re.subn(r"^rate_per_minute = 120\b", "rate_per_minute = 4", source, flags=re.M)
    assert agents == 3, "the demo policy changed shape: gpt, claude and local at 120 a minute"
    policy = tmp_path / "tight.toml"
    policy.write_text(tight)
    async with running_locked_system(
        locked,
        tmp_path / "keys",
        router_options={"turn_timeout_s": 20.0},
        policy=policy,
    ):
        env = locked_env(locked)
        config = ("--config", str(locked.settings_file("cli")))
        runs = [
            parley_cli(env, "collab", *config, "--first", "claude", "--max-rounds", "4", DEMO_GOAL)
            for _ in range(4)
        ]
        ended = await asyncio.gather(*(finished(run, 90) for run in runs))
    for code, lines in ended:
        assert code == 0, lines
        assert lines[-1] == "stopped: final (round 4)", lines
        assert not any("AGENT_UNAVAILABLE" in line or "RATE_LIMITED" in line for line in lines)


async def test_a_second_answer_to_the_same_call_is_refused_as_a_duplicate_and_audited(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    """claude answers the call it got, then answers it again under a new id: the second is
    refused (`DUPLICATE_ENVELOPE`, rule `duplicate_answer`) and its decision is recorded; the
    session ended on the first answer."""
    locked = locked_down
    async with (
        running_locked_system(locked, tmp_path / "keys", {}, router_options=ROUTER_OPTIONS),
        played(locked, "claude") as claude,
        decisions_of(locked, "claude") as decisions,
    ):
        say = parley_cli(
            locked_env(locked), "say", "--config", str(locked.settings_file("cli")), "@claude", "hi"
        )
        delivered, call = await claude.call()
        first, second = _answer(call, "hello"), _answer(call, "hello again")
        await claude.submit(first, delivered, call)
        assert (await decision_on(decisions, first.id)).allowed
        await claude.submit(second, delivered, call)
        refusal = await claude.refusal_of(second.id)
        assert refusal.code == ErrorCode.DUPLICATE_ENVELOPE, refusal
        assert refusal.details["rule"] == "duplicate_answer"
        decision = await decision_on(decisions, second.id)
        assert not decision.allowed
        assert (decision.code, decision.rule) == (ErrorCode.DUPLICATE_ENVELOPE, "duplicate_answer")
        exit_code, lines = await finished(say, 30)
        assert exit_code == 0, lines
        assert any("hello" in line for line in lines), lines
