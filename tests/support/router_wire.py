"""Playing the gate and the agents around a real router process.

The test delivers what the gate would (a person's message from `cli`, an agent's answer from
that agent, a refusal) to `parley.deliver.router` with the gate's headers, reads what the
router submits from `parley.submit.router`, and answers each agent call with a scripted turn,
as a scripted agent host behind the gate would. Session events are read from
`parley.events.<owner>.<session>`, and the stored session from the sessions bucket. Playing the
agents includes their heartbeats: the router gives up on an agent that never beats.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import msgspec
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from actors.router._session import Session
from bus import MSG_ID, SENDER, TraceHeaders, parse_trace_headers
from schemas import (
    ActorHeartbeat,
    AgentCall,
    AgentResponse,
    AnyEnvelope,
    Control,
    Error,
    ErrorCode,
    Handoff,
    HumanMessage,
    Namespace,
    Reply,
    SessionEvent,
    decode_envelope,
    derive_id,
    encode,
    heartbeat_key,
    new_id,
    utc_now,
)

__all__ = (
    "END_EVENTS",
    "AgentTurn",
    "RouterWire",
    "Script",
    "Timeline",
    "collaborate",
    "relay_cli",
    "relay_turns",
    "stop",
)

END_EVENTS = frozenset({"session_completed", "session_failed", "session_canceled"})


@dataclass(frozen=True)
class AgentTurn:
    """What a scripted agent answers: a reply, raw text that is not the reply JSON, or an
    error (as an agent host reports a brain that failed)."""

    reply: Reply | None = None
    raw: str | None = None
    error: ErrorCode | None = None
    retryable: bool = False


Script = Callable[[AgentCall], AgentTurn | None]
"""An agent's turn for a call; None leaves the call unanswered (an agent still thinking)."""


def collaborate(
    text: str,
    *,
    max_rounds: int = 6,
    first: str = "claude",
    participants: tuple[str, ...] = ("gpt", "claude"),
    session_id: str | None = None,
    mode: str = "collaborate",
) -> HumanMessage:
    """A person's collaboration request, as `parley collab` sends it."""
    return HumanMessage(
        id=new_id(),
        created_at=utc_now(),
        sender="you",
        text=text,
        call_id=new_id(),
        mode=mode,  # type: ignore[arg-type]
        participants=participants,
        first_speaker=first,
        max_rounds=max_rounds,
        session_id=session_id or new_id(),
    )


def stop(session_id: str) -> Control:
    return Control(id=new_id(), created_at=utc_now(), action="stop", session_id=session_id)


@dataclass
class RouterWire:
    """The gate's side of the router's two subjects."""

    js: JetStreamContext
    ns: Namespace
    router: str = "router"
    seen_calls: set[str] = field(default_factory=set)

    agents: tuple[str, ...] = ("gpt", "claude")
    beat_period_s: float = 600.0
    """The period the played agents claim: long enough that one beat lasts any test."""

    async def open(self) -> None:
        self._sub = await self.js.pull_subscribe(
            self.ns.submit(self.router), durable="test-gate", stream=self.ns.stream("submit")
        )
        registry = await self.js.key_value(self.ns.bucket("registry"))
        now = utc_now()
        for agent in self.agents:
            heartbeat = ActorHeartbeat(
                actor_id=agent,
                kind="agent",
                pid=os.getpid(),
                started_at=now,
                beat_at=now,
                period_s=self.beat_period_s,
            )
            await registry.put(heartbeat_key(agent), encode(heartbeat))

    async def deliver(
        self, envelope: AnyEnvelope, sender: str, trace: TraceHeaders, msg_id: str = ""
    ) -> None:
        """Deliver as the gate does; `msg_id`: a message id of its own (a redelivery that
        JetStream must not drop as a duplicate), else the envelope's."""
        headers = trace.to_headers(envelope.id)
        if msg_id:
            headers[MSG_ID] = msg_id
        headers[SENDER] = sender
        await self.js.publish(self.ns.deliver(self.router), encode(envelope), headers=headers)

    async def start(self, msg: HumanMessage) -> None:
        """Deliver a person's message from the CLI: a root, its own trace."""
        await self.deliver(msg, "cli", TraceHeaders(trace_id=msg.id, origin="cli"))

    async def control(self, control: Control) -> None:
        await self.deliver(control, "cli", TraceHeaders(trace_id=control.id, origin="cli"))

    async def submitted(self, timeout: float = 20.0) -> tuple[TraceHeaders, AnyEnvelope]:
        """The next envelope the router submitted (acked, so each is read once)."""
        (msg,) = await self._sub.fetch(1, timeout=timeout)
        await msg.ack_sync()
        envelope = decode_envelope(msg.data)
        return parse_trace_headers(msg.headers, envelope.id), envelope

    async def answer(
        self, call: AgentCall, trace: TraceHeaders, turn: AgentTurn, msg_id: str = ""
    ) -> None:
        """Answer `call` as its agent would: one answer per call, whatever the redeliveries
        (`msg_id`: as `deliver`'s)."""
        back = trace.child(call.id, -1)
        if turn.error is not None:
            error = Error(
                id=derive_id(call.id, "agent-error"),
                created_at=utc_now(),
                code=turn.error,
                message=f"{call.target} failed",
                retryable=turn.retryable,
                cause_id=call.id,
            )
            await self.deliver(error, call.target, back)
            return
        reply = turn.reply or Reply(message=turn.raw or "(empty)")
        response = AgentResponse(
            id=derive_id(call.id, "answer"),
            created_at=utc_now(),
            sender=call.target,
            text=turn.raw if turn.raw is not None else reply.message,
            call_id=call.call_id,
            session_id=call.session_id,
            round=call.round,
            max_rounds=call.max_rounds,
            reply=reply,
            malformed=turn.raw is not None,
        )
        await self.deliver(response, call.target, back, msg_id)


async def relay_turns(
    wire: RouterWire,
    script: Script,
    *,
    on_call: Callable[[AgentCall], Awaitable[None]] | None = None,
) -> None:
    """Answer every agent call the router submits, for ever (cancel the task to stop)."""
    while True:
        try:
            trace, envelope = await wire.submitted(timeout=1.0)
        except TimeoutError:
            continue
        if not isinstance(envelope, AgentCall) or envelope.id in wire.seen_calls:
            continue
        wire.seen_calls.add(envelope.id)
        if on_call is not None:
            await on_call(envelope)
        turn = script(envelope)
        if turn is not None:
            await wire.answer(envelope, trace, turn)


async def relay_cli(wire: RouterWire) -> None:
    """Move what `parley collab` submits to the router, as the gate would (for ever)."""
    sub = await wire.js.pull_subscribe(
        wire.ns.submit("cli"), durable="test-gate-cli", stream=wire.ns.stream("submit")
    )
    while True:
        try:
            (msg,) = await sub.fetch(1, timeout=1.0)
        except TimeoutError:
            continue
        envelope = decode_envelope(msg.data)
        await wire.deliver(envelope, "cli", parse_trace_headers(msg.headers, envelope.id, "cli"))
        await msg.ack_sync()


class Timeline:
    """A session's events, read from the start of `parley.events.<owner>.<session>`."""

    def __init__(self, js: JetStreamContext, ns: Namespace, session_id: str) -> None:
        self._js, self._ns, self.session_id = js, ns, session_id
        self.events: list[SessionEvent] = []
        self.refusals: list[Error] = []

    async def open(self) -> None:
        self._sub = await self._js.subscribe(
            f"{self._ns.root}.events.*.{self.session_id}",  # every owner's: refusals too
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )

    async def next(self, timeout: float = 20.0) -> SessionEvent | Error:
        """The next event, or a refusal the router answered a person with."""
        msg = await self._sub.next_msg(timeout=timeout)
        event = decode_envelope(msg.data)
        if isinstance(event, Error):
            self.refusals.append(event)
            return event
        assert isinstance(event, SessionEvent)
        self.events.append(event)
        return event

    async def refusal(self, timeout: float = 20.0) -> Error:
        async with asyncio.timeout(timeout):
            while True:
                if isinstance(event := await self.next(timeout=timeout), Error):
                    return event

    async def until_end(self, timeout: float = 30.0) -> SessionEvent:
        async with asyncio.timeout(timeout):
            while True:
                event = await self.next(timeout=timeout)
                if isinstance(event, SessionEvent) and event.event_type in END_EVENTS:
                    return event

    async def rest(self, timeout: float = 20.0) -> None:
        """Read whatever else the stream holds for the session: as many messages as its
        subjects hold on the server, less those read (the consumer's own pending count
        leaves out what it pushed already and the client has not taken)."""
        stream = self._ns.stream("events")
        subjects = f"{self._ns.root}.events.*.{self.session_id}"
        info = await self._js.stream_info(stream, subjects_filter=subjects)
        stored = sum((info.state.subjects or {}).values())
        for _ in range(stored - len(self.events) - len(self.refusals)):
            await self.next(timeout=timeout)

    async def close(self) -> None:
        await self._sub.unsubscribe()

    def turns(self) -> list[tuple[int | None, str | None, str]]:
        return [
            (e.round, e.speaker, str(e.payload["message"]))
            for e in self.events
            if e.event_type == "step_completed"
        ]


async def stored_session(js: JetStreamContext, ns: Namespace, session_id: str) -> Session:
    kv = await js.key_value(ns.bucket("sessions"))
    entry = await kv.get(f"session.{session_id}")
    assert entry.value is not None
    return msgspec.json.decode(entry.value, type=Session)


def handoff(message: str, to: str, task: str, *, final: bool = False) -> AgentTurn:
    return AgentTurn(reply=Reply(message=message, handoff=Handoff(to=to, task=task), final=final))
