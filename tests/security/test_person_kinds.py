"""Issue 13, finding 3: agents could act as people.

The whole path runs as real processes under the least-privilege config (the gate, the
router, and the `claude` agent host where it can stay honest on its own), each its own nkey
user. The attacker is a raw nats-py client holding gpt's credentials: it reads gpt's own
deliveries and submits on `parley.submit.gpt`, the only things the broker lets gpt do. It has
a cause to submit under because a person called it in a session of its own, as any agent
that takes part in sessions has. The person is a raw client holding the `cli` credentials,
submitting what `parley collab` submits.

Where an agent must stay silent while the attack lands (its session has to be waiting on it),
the test plays that agent too with its own credentials, and the played agents write no
heartbeat, so the router is given a long grace before it judges them gone.

The router-level checks (a session is steered only by its opener or an operator) are also
attacked directly: a test plays the gate around a real router process, since this broker
knows one person principal only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, NotFoundError

from actors.router._session import Session
from bus import SENDER, SENDER_ROLE, EmbeddedServer, TraceHeaders, parse_trace_headers
from schemas import (
    AgentCall,
    AgentResponse,
    AnyEnvelope,
    Control,
    Decision,
    Error,
    ErrorCode,
    Handoff,
    HumanMessage,
    Namespace,
    Reply,
    decode_envelope,
    derive_id,
    encode,
    hop_delta_for,
    new_id,
    utc_now,
)
from tests.support.lockdown import LockedDown
from tests.support.processes import READY, parley_env, start_actor
from tests.support.router_wire import RouterWire, Timeline, collaborate, stop
from tests.support.system import running_locked_system

ROUTER_OPTIONS = {"start_grace_s": 600.0, "turn_timeout_s": 600.0}
"""The played agents write no heartbeat: the router must not judge them gone mid-test."""
REFUSAL_S = 20.0


@dataclass
class Principal:
    """A raw client holding one principal's credentials, reading its own deliveries."""

    name: str
    nc: NATS
    js: JetStreamContext
    ns: Namespace
    reader: JetStreamContext
    """The whole timeline, read as an operator reads it: a person's own account follows it
    only live, and an agent's not at all (tools/natsconf/_permissions.py)."""
    sub: JetStreamContext.PullSubscription | None = None

    async def delivered(self, timeout: float = REFUSAL_S) -> tuple[TraceHeaders, AnyEnvelope]:
        """The next envelope the gate delivered to this principal (acked)."""
        assert self.sub is not None, f"{self.name} reads no deliveries"
        (msg,) = await self.sub.fetch(1, timeout=timeout)
        await msg.ack_sync()
        envelope = decode_envelope(msg.data)
        return parse_trace_headers(msg.headers, envelope.id), envelope

    async def calls(self, count: int) -> dict[str, tuple[TraceHeaders, AgentCall]]:
        """The next `count` agent calls delivered, by session id."""
        found: dict[str, tuple[TraceHeaders, AgentCall]] = {}
        while len(found) < count:
            trace, envelope = await self.delivered()
            assert isinstance(envelope, AgentCall), envelope
            assert envelope.session_id is not None
            found[envelope.session_id] = (trace, envelope)
        return found

    async def submit(self, envelope: AnyEnvelope, cause: tuple[TraceHeaders, AgentCall]) -> None:
        """Submit `envelope` caused by a call delivered to this principal, with honest headers:
        the attack is in what the envelope is, not in its claims."""
        trace, call = cause
        headers = trace.child(call.id, hop_delta_for(envelope)).to_headers(envelope.id)
        await self.js.publish(self.ns.submit(self.name), encode(envelope), headers=headers)

    async def say(self, msg: HumanMessage | Control) -> None:
        """Submit as `parley collab` does: a root, its own trace."""
        headers = TraceHeaders(trace_id=msg.id, origin=self.name).to_headers(msg.id)
        await self.js.publish(self.ns.submit(self.name), encode(msg), headers=headers)

    async def answer(self, cause: tuple[TraceHeaders, AgentCall], reply: Reply) -> AgentResponse:
        _, call = cause
        response = AgentResponse(
            id=derive_id(call.id, "answer"),
            created_at=utc_now(),
            sender=self.name,
            text=reply.message,
            call_id=call.call_id,
            session_id=call.session_id,
            round=call.round,
            max_rounds=call.max_rounds,
            reply=reply,
        )
        await self.submit(response, cause)
        return response


@asynccontextmanager
async def principal(locked: LockedDown, name: str, *, reads: bool) -> AsyncIterator[Principal]:
    nc = await locked.connect(name)
    operator = await locked.connect("provisioner")
    try:
        js = locked.js(nc, name)
        sub = None
        if reads:
            sub = await js.pull_subscribe_bind(durable=name, stream=locked.ns.stream("deliver"))
        yield Principal(name, nc, js, locked.ns, operator.jetstream(), sub)
    finally:
        await nc.close()
        await operator.close()


def single(agent: str, text: str) -> HumanMessage:
    """A person's single call to one agent, as `parley say` sends it."""
    return HumanMessage(
        id=new_id(),
        created_at=utc_now(),
        text=text,
        call_id=new_id(),
        mode="single",
        participants=(agent,),
        first_speaker=agent,
        max_rounds=1,
        session_id=new_id(),
    )


async def refusal_of(attacker: Principal, envelope_id: str) -> Error:
    """The gate's refusal of `envelope_id`, delivered to the attacker as every refusal is."""
    while True:
        _, delivered = await attacker.delivered()
        if isinstance(delivered, Error) and delivered.cause_id == envelope_id:
            return delivered


async def decision_about(reader: Principal, sender: str, envelope_id: str) -> Decision:
    """The gate's decision about `envelope_id` from `sender`, as soon as it is stored."""
    subject = reader.ns.decisions(sender)
    sub = await reader.reader.subscribe(subject, ordered_consumer=True)
    try:
        while True:
            decision = decode_envelope((await sub.next_msg(timeout=REFUSAL_S)).data)
            assert isinstance(decision, Decision), decision
            if decision.envelope_id == envelope_id:
                return decision
    finally:
        await sub.unsubscribe()


async def timeline(person: Principal, session_id: str) -> Timeline:
    line = Timeline(person.reader, person.ns, session_id)
    await line.open()
    return line


async def test_an_agent_cannot_open_a_session_as_a_person(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    """(a) gpt submits a human_message to the router: refused UNAUTHORIZED and audited; no
    session is opened and claude, whom gpt named, is never called."""
    locked, ns = locked_down, locked_down.ns
    async with (
        running_locked_system(
            locked, tmp_path / "keys", {"claude": "claude"}, router_options=ROUTER_OPTIONS
        ),
        principal(locked, "cli", reads=False) as person,
        principal(locked, "gpt", reads=True) as gpt,
    ):
        await person.say(single("gpt", "@gpt what is 2 + 2?"))
        (cause,) = (await gpt.calls(1)).values()

        forged = collaborate(
            "gpt's own goal, in a person's name",
            first="claude",
            participants=("claude",),
            max_rounds=100,
        )
        await gpt.submit(forged, cause)
        refused = await refusal_of(gpt, forged.id)
        assert refused.code is ErrorCode.UNAUTHORIZED, refused
        assert "gpt may not send human_message" in refused.message

        # Audited: the gate's decision names the rule. It is stored with the refusal's input,
        # not before the refusal is delivered (two streams, in no set order): wait for it.
        events = ns.stream("events")
        decision = await decision_about(person, "gpt", forged.id)
        assert decision.allowed is False
        assert decision.rule == "speaks_for_person"
        # Nothing reached the router: no session, no timeline, and claude was never called.
        assert forged.session_id is not None
        with pytest.raises(NotFoundError):
            await person.reader.get_last_msg(events, ns.events("gpt", forged.session_id))
        router = await locked.connect("router")
        try:
            sessions = await router.jetstream().key_value(ns.bucket("sessions"))
            with pytest.raises(KeyNotFoundError):
                await sessions.get(f"session.{forged.session_id}")
        finally:
            await router.close()
        claude = await locked.connect("claude")
        try:
            info = await locked.js(claude, "claude").consumer_info(ns.stream("deliver"), "claude")
            assert info.delivered.consumer_seq == 0, "claude was called"
        finally:
            await claude.close()


async def test_an_agent_cannot_stop_a_persons_session(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    """(b) A person's session waits on gpt; gpt, holding a cause from another session (another
    trace), sends a Stop for it: refused, and the session runs to its normal end."""
    locked = locked_down
    async with (
        running_locked_system(
            locked, tmp_path / "keys", {"claude": "claude"}, router_options=ROUTER_OPTIONS
        ),
        principal(locked, "cli", reads=False) as person,
        principal(locked, "gpt", reads=True) as gpt,
    ):
        elsewhere, victim = single("gpt", "@gpt hello"), single("gpt", "@gpt summarise this")
        assert victim.session_id is not None and elsewhere.session_id is not None
        line = await timeline(person, victim.session_id)
        await person.say(elsewhere)
        await person.say(victim)
        calls = await gpt.calls(2)

        attack = stop(victim.session_id)
        await gpt.submit(attack, calls[elsewhere.session_id])  # another trace's cause
        await gpt.answer(calls[victim.session_id], Reply(message="a summary", final=True))

        end = await line.until_end()
        assert (end.event_type, end.stop_reason) == ("session_completed", "final"), end
        refused = await refusal_of(gpt, attack.id)
        assert refused.code is ErrorCode.UNAUTHORIZED, refused
        assert "gpt may not send control" in refused.message


async def test_an_error_naming_another_session_does_not_end_it(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    """(c) gpt, called in its own session, sends an error for the call another session waits
    on (claude's), naming that session in `details` and the call in `cause_id` (call ids
    derive from ids participants see; the test hands gpt the real one). Neither session may
    move on it: the other goes on to claude's answer, gpt's own to gpt's."""
    locked = locked_down
    async with (
        running_locked_system(locked, tmp_path / "keys", {}, router_options=ROUTER_OPTIONS),
        principal(locked, "cli", reads=False) as person,
        principal(locked, "gpt", reads=True) as gpt,
        principal(locked, "claude", reads=True) as claude,
    ):
        own, victim = single("gpt", "@gpt hello"), single("claude", "@claude draft a poem")
        assert own.session_id is not None and victim.session_id is not None
        own_line, victim_line = (
            await timeline(person, own.session_id),
            await timeline(person, victim.session_id),
        )
        await person.say(own)
        await person.say(victim)
        (gpt_call,) = (await gpt.calls(1)).values()
        (claude_call,) = (await claude.calls(1)).values()

        forged = Error(
            id=new_id(),
            created_at=utc_now(),
            code=ErrorCode.INTERNAL_ERROR,
            message="claude crashed",
            details={"session_id": victim.session_id},
            cause_id=claude_call[1].id,
        )
        await gpt.submit(forged, gpt_call)
        await claude.answer(claude_call, Reply(message="a poem", final=True))
        end = await victim_line.until_end()
        assert (end.event_type, end.stop_reason) == ("session_completed", "final"), end

        await gpt.answer(gpt_call, Reply(message="hello", final=True))
        end = await own_line.until_end()
        assert (end.event_type, end.stop_reason) == ("session_completed", "final"), end


async def test_an_agent_the_pending_call_did_not_go_to_cannot_fail_it(
    locked_down: LockedDown, tmp_path: Path
) -> None:
    """(c) In one collaboration gpt has had its turn and handed off to claude; gpt then sends
    an error for claude's call (its id derives from gpt's own answer's id), in the session's
    own trace. Only the agent called (or the gate refusing the call) may fail it."""
    locked = locked_down
    async with (
        running_locked_system(locked, tmp_path / "keys", {}, router_options=ROUTER_OPTIONS),
        principal(locked, "cli", reads=False) as person,
        principal(locked, "gpt", reads=True) as gpt,
        principal(locked, "claude", reads=True) as claude,
    ):
        msg = collaborate("a limerick", first="gpt", max_rounds=4)
        assert msg.session_id is not None
        line = await timeline(person, msg.session_id)
        await person.say(msg)
        (first,) = (await gpt.calls(1)).values()
        handoff = Handoff(to="claude", task="finish it")
        answered = await gpt.answer(first, Reply(message="There once was", handoff=handoff))
        (second,) = (await claude.calls(1)).values()
        assert second[1].id == derive_id(answered.id, "call")  # what gpt could work out

        forged = Error(
            id=new_id(),
            created_at=utc_now(),
            code=ErrorCode.INTERNAL_ERROR,
            message="claude crashed",
            cause_id=second[1].id,
        )
        await gpt.submit(forged, first)
        await claude.answer(second, Reply(message="a limerick, done", final=True))
        end = await line.until_end()
        assert (end.event_type, end.stop_reason) == ("session_completed", "final"), end


# -- the router's own check: a session is steered by its opener or an operator ---------------


async def test_only_the_opener_or_an_operator_steers_a_session(
    nc: NATS, nats_server: EmbeddedServer, namespace: Namespace
) -> None:
    """Several people are several principals: a Stop delivered from another person (whom the
    gate admits, since that person speaks for a person) is refused by the router, with the
    session going on; an operator's Stop (the gate's Parley-Sender-Role) cancels it."""
    ns = namespace
    wire = RouterWire(nc.jetstream(), ns)
    await wire.open()
    options = '{"start_grace_s": 600, "turn_timeout_s": 600}'
    router = start_actor(
        "router", "router", {**parley_env(nats_server.url, ns.root), "PARLEY_OPTIONS": options}
    )
    try:
        await router.wait_line(READY)
        msg = collaborate("a haiku", first="claude")
        assert msg.session_id is not None
        line = Timeline(nc.jetstream(), ns, msg.session_id)
        await line.open()
        await wire.start(msg)  # opened by `cli`
        await wire.submitted()  # its first call, left unanswered

        other = stop(msg.session_id)
        other_person = TraceHeaders(trace_id=other.id, origin="alice")
        await wire.deliver(other, "alice", other_person)
        refused = await line.refusal()
        assert refused.code is ErrorCode.UNAUTHORIZED, refused
        assert "alice cannot stop a session it did not open" in refused.message
        kv = await nc.jetstream().key_value(ns.bucket("sessions"))
        entry = await kv.get(f"session.{msg.session_id}")
        assert entry.value is not None
        stored = msgspec.json.decode(entry.value, type=Session)
        assert stored.open and stored.opener == "cli"

        by_operator = stop(msg.session_id)
        headers = TraceHeaders(trace_id=by_operator.id, origin="ops").to_headers(by_operator.id)
        headers.update({SENDER: "ops", SENDER_ROLE: "operator"})
        await nc.jetstream().publish(ns.deliver("router"), encode(by_operator), headers=headers)
        end = await line.until_end()
        assert (end.event_type, end.stop_reason) == ("session_canceled", "canceled"), end
        await line.close()
    finally:
        router.close()
